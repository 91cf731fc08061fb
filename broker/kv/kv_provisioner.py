"""The KV store provisions itself on first use (``kvEnable=true`` and no ``mqadmin kvInit``).

Clients that find no shards ask the first master by broker name that has ``kvEnable=true``; that broker creates
the shards with the default count on every master of its cluster that has KV on, exactly as ``kvInit`` would,
under one lock. Concurrent first uses all land on the same broker and the lock makes them one creation: the
second finds the shards the first made. Blocking (admin calls to the name server and brokers): run off the loop.
"""

import logging
import threading
import time

from client import Admin, MQClientError
from common.kv_shard import DEFAULT_KV_SHARDS, KV_TOPIC

log = logging.getLogger(__name__)

ROUTE_WAIT_S = 15.0  # how long the shards may take to appear in the name server's route after creation


class KvProvisionError(Exception):
    """Provisioning could not complete; the message says why (retryable unless it says otherwise)."""


class KvProvisioner:
    def __init__(self, namesrv_addrs: list[str], cluster_name: str, broker_name: str,
                 credentials: tuple[str, str] | None = None) -> None:
        self.namesrv_addrs = namesrv_addrs
        self.credentials = credentials  # innerClientAuthenticationCredentials: creating shards is an admin call
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self._lock = threading.Lock()

    def provision(self) -> int:
        """The number of shards, creating them first if there are none; raises :class:`KvProvisionError`."""
        if not self.namesrv_addrs:
            raise KvProvisionError(f"broker {self.broker_name} has no namesrvAddr: create the shards with kvInit")
        with self._lock, Admin(";".join(self.namesrv_addrs), credentials=self.credentials) as admin:
            try:
                return self._provision(admin)
            except MQClientError as exc:
                raise KvProvisionError(f"provisioning the KV store failed: {exc}") from None

    def _provision(self, admin: Admin) -> int:
        status = admin.static_topic_status(KV_TOPIC)
        if status is None:
            masters = admin.brokers(cluster=self.cluster_name)
            names = sorted(b.broker_name for b in masters
                           if admin.broker_runtime_info(b.addr).get("kvEnable") == "true")
            if names and names[0] != self.broker_name:  # a client that saw fewer brokers: send it on
                raise KvProvisionError(f"broker {names[0]} creates the KV store, not {self.broker_name}; retry")
            admin.kv_init(DEFAULT_KV_SHARDS, brokers=names)
            log.info("kv_provisioned shards=%d brokers=%s", DEFAULT_KV_SHARDS, ",".join(sorted(names)))
            total = DEFAULT_KV_SHARDS
        else:
            total = status.total_queues
        deadline = time.monotonic() + ROUTE_WAIT_S
        while not admin.is_static_topic(KV_TOPIC):  # answer once clients can route to the shards
            if time.monotonic() > deadline:
                raise KvProvisionError(f"the KV shards were created but the name server has no route for "
                                       f"{KV_TOPIC} after {ROUTE_WAIT_S:.0f} s; retry")
            time.sleep(0.05)
        return total
