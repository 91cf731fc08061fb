"""``python -m bench.storeless_broker -c broker.conf``: ``broker.main`` with the one step of an SDK send that
writes removed (``MessageStore._append``). A producer's batch is received on the send stream, checked as always
(sizes, topic, every record's CRC) and answered with offsets; it is neither appended to the commitlog nor
dispatched, and is gone.

It measures what the store's append costs a send, and bounds what any store could give the SDK's produce here:
the cluster benchmark's row beside the real broker's (``bench/cluster_bench.py``). Never a broker to use."""

import runpy
import time

from broker.store.message_store import MessageStore
from broker.store.put_message_result import AppendResult, PutMessageResult, PutMessageStatus
from common.wire_batch import WireBatch


class _Offsets:
    """Queue offsets and commitlog offsets as a store would assign them."""

    def __init__(self) -> None:
        self.queue_ends: dict[tuple[bytes, int], int] = {}
        self.end = 0

    def assign(self, store: MessageStore, batch: WireBatch) -> PutMessageResult:
        key = (batch.topic, batch.queue_id)
        queue_offset = self.queue_ends.get(key, 0)
        self.queue_ends[key] = queue_offset + len(batch.sizes)
        physical: list[int] = []
        for size in batch.sizes:
            physical.append(self.end)
            self.end += size
        append = AppendResult(physical, queue_offset, int(time.time() * 1000), self.end)
        return PutMessageResult(PutMessageStatus.PUT_OK, append=append, store_host=store.store_host)


if __name__ == "__main__":
    offsets = _Offsets()
    MessageStore._append = lambda self, batch, *_, **__: offsets.assign(self, batch)  # type: ignore[method-assign]
    runpy.run_module("broker.main", run_name="__main__")
