"""``python -m bench.official_client.answering_proxy`` (mqproxy's flags): mqproxy whose sends answer SEND_OK at once,
without a broker, for ``bench/proxy_bench.py``'s ceiling row. Routes, settings and everything else are the real
proxy's; only the send is cut short. The official client's rate against it is what that client can do on this
machine with a proxy that costs only its own gRPC front end: the bound any proxy's figure is measured against.
A measuring tool: never a daemon to run."""

import sys

from client.results import SendResult
from common.message_queue import MessageQueue
from proxy.main import main
from proxy.message_convert import OutgoingMessage
from proxy.processor.send_processor import SendProcessor


async def _answer_at_once(self: SendProcessor, outgoing: OutgoingMessage) -> SendResult:
    return SendResult(queue=MessageQueue(outgoing.message.topic, "answering-proxy", 0), queue_offset=0)


if __name__ == "__main__":
    SendProcessor._send = _answer_at_once  # type: ignore[method-assign]
    sys.exit(main())
