"""The push consumer's offsets are kept per process queue: a call finishing after its queue was dropped, or after
the queue was taken again, cannot write its (old) progress. A reset of the group's offsets drops the queues and
takes them again at once from the new offsets; a task of the old process queue that finished later (a send-back
of its failed messages can take seconds) wrote the pre-reset position over the reset one, and the next commit
persisted it: the backlog the operator skipped came back at the next restart or rebalance."""

from client.consumer.offset_store import OffsetStore
from client.consumer.process_queue import ProcessQueue
from common.message import MessageExt
from common.message_queue import MessageQueue

MQ = MessageQueue("T", "broker-a", 0)


def test_a_late_update_of_the_old_process_queue_leaves_the_reset_offset():
    offsets = OffsetStore()
    old = ProcessQueue(MQ, 10)
    offsets.track(old, 10)
    offsets.update(old, 12)
    assert offsets.read(MQ) == 12
    offsets.remove(MQ)  # the reset drops the queue ...
    offsets.update(old, 13)
    assert offsets.read(MQ) == -1
    new = ProcessQueue(MQ, 500)  # ... and takes it again from the reset offset
    offsets.track(new, 500)
    offsets.update(old, 14)  # the old queue's task finishes now
    assert offsets.read(MQ) == 500
    offsets.update(new, 501)
    assert offsets.read(MQ) == 501


def test_a_run_finished_after_its_queue_was_reset_leaves_the_counts_alone():
    """A reset (the pull offset was illegal) forgets the runs tasks are still handling: their finish subtracted
    from the cleared counts, which went negative and let flow control pull past its limits."""
    pq = ProcessQueue(MQ, 0)
    run = pq.put([MessageExt(MQ.topic, b"m", 0, i, 0, 0, 0) for i in range(4)], 4, 4)
    assert run is not None
    pq.reset(100)
    assert pq.finish(run, 0, 4) == 100
    assert pq.cached() == (0, 0)


def test_an_unchanged_offset_is_committed_again_now_and_then():
    """Committed only when it changed, an offset a broker could not finish committing (a static topic's older link
    on a broker that was down) stayed so: an idle group's lag showed for good (the push-static review)."""
    from client.consumer import offset_store

    written: list[int] = []

    class Recording(OffsetStore):
        def _write(self, mq: MessageQueue, offset: int) -> None:
            written.append(offset)

    now = [1000.0]
    offsets = Recording(clock=lambda: now[0])
    offsets.track(ProcessQueue(MQ, 7), 7)
    offsets.persist(MQ)
    offsets.persist(MQ)  # unchanged, and just committed
    assert written == [7]
    now[0] += offset_store.RECOMMIT_S
    offsets.persist(MQ)
    assert written == [7, 7]
