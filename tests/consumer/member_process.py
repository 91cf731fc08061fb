"""A push-consumer member in a process of its own, so a test can SIGKILL it: prints ``ready on ...`` once started
and ``got QUEUE OFFSET BODY`` for every message its handler finishes."""

import argparse
import signal
import sys
import threading

from client import PushConsumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--orderly", action="store_true")
    parser.add_argument("--broadcasting", action="store_true")
    args = parser.parse_args()
    lock = threading.Lock()

    def handler(msg) -> None:
        with lock:
            print(f"got {msg.store_host}/{msg.queue_id} {msg.queue_offset} "
                  f"{msg.body.decode()}", flush=True)

    consumer = PushConsumer(args.namesrv, group=args.group, topic=args.topic, handler=handler,
                            consume_from_first=True, orderly=args.orderly,
                            message_model="BROADCASTING" if args.broadcasting else "CLUSTERING")
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    consumer.start()
    print(f"ready on 127.0.0.1:0 client={consumer.client_id}", flush=True)
    stopped.wait()
    consumer.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
