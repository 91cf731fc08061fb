"""``mqbroker -c broker.conf [-n NAMESRV_ADDR]``: the broker daemon."""

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from broker.broker_config import BrokerConfig, ConfigError, load_broker_config
from broker.broker_controller import BrokerController
from broker.metadata.json_file import MetadataFileError
from client.switch_interval import keep_switch_interval
from common.grpc_core_log import quiet_answers_not_sent
from common.open_files_limit import raise_open_files_limit
from common.statictopic.mapping_checks import MappingError
from common.storage_refusal import is_storage_failure, storage_hint
from common.tls import TlsError, set_process_ca

log = logging.getLogger("broker")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqbroker", description="The broker daemon.")
    parser.add_argument("-c", "--config", help="broker.conf (Java properties, RocketMQ key names)")
    parser.add_argument("-n", "--namesrv-addr", help="name servers, 'host:port;host:port' (overrides namesrvAddr)")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> BrokerConfig:
    text = ""
    if args.config:
        try:
            text = Path(args.config).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {args.config}: {exc.strerror}") from None
    overrides = {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else {}
    rejoin_ports = os.environ.pop(REJOIN_PORTS_ENV, "")
    if rejoin_ports:  # a replica restarting to follow a new master keeps the addresses the group knows
        listen, ha = rejoin_ports.split(",")
        overrides |= {"listenPort": listen, "haListenPort": ha}
    return load_broker_config(text, overrides)


REJOIN_PORTS_ENV = "MQBROKER_REJOIN_PORTS"


async def serve(config: BrokerConfig) -> str:
    """Run until a signal; returns why the broker must restart (controller mode: a deposed master), or ''."""
    controller = BrokerController(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    controller.on_rejoin = stop.set
    addr = await controller.start()
    print(f"mqbroker {config.broker_name} ready on {addr}", flush=True)
    await stop.wait()
    await controller.shutdown()
    if controller.rejoin_reason:
        os.environ[REJOIN_PORTS_ENV] = f"{addr.rsplit(':', 1)[1]},{controller.ha_server_addr.rsplit(':', 1)[1]}"
    return controller.rejoin_reason


def rejoin(why: str) -> None:
    """Start afresh in this process (same pid, same arguments, same ports): recovery, then follow the master."""
    log.warning("broker_restarting reason=%r", why)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_answers_not_sent()  # gRPC's traceback for an answer a gone client did not take: one line
    # The broker's own hand-offs were tuned at Python's default; the SDK clients it runs (KV provisioning) keep it.
    keep_switch_interval()
    args = parse_args(argv)
    try:
        config = load_config(args)
        set_process_ca(config.tls_client_ca_path or None)  # every connection the broker opens then uses TLS
    except (ConfigError, TlsError) as exc:
        print(f"mqbroker: bad configuration: {exc}", file=sys.stderr)
        sys.exit(1)
    raise_open_files_limit()
    try:
        rejoin_reason = asyncio.run(serve(config))
    except (ConfigError, MappingError, MetadataFileError) as exc:
        print(f"mqbroker: bad configuration: {exc}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        if not is_storage_failure(exc):
            raise
        # (RocksDB's I/O errors are bare Exceptions: a store opened on a full disk replays its log and fails so)
        print(f"mqbroker: cannot start: {exc}{storage_hint(exc)}", file=sys.stderr)
        sys.exit(1)
    if rejoin_reason:
        rejoin(rejoin_reason)


if __name__ == "__main__":
    main()
