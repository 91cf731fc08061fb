"""POP acks on the AckMessageStream, answered in order (under SYNC_FLUSH each ack runs on POP's worker thread and
the stream waits for it), with real daemons in the broker configs where acks leave the event loop or the store
changes: many SimpleConsumer threads receive and ack_async thousands of messages, each exactly once; an ack of an
already-acked handle, sent on the same stream as (and merged with) valid acks, is refused for that handle only;
and after a SIGKILL and a restart on the same store nothing acked is handed out again and nothing un-acked is
lost."""

import threading
import time
from collections import Counter
from concurrent.futures import Future

import pytest

from client import Message, MQClientError, Producer, PullConsumer, SimpleConsumer
from client.ack_batcher import ack_outcomes
from common.response_code import ResponseCode
from proto import pop_pb2
from tests.cluster import make_cluster, wait_until
from tests.pop.test_pop_consumption import create

TOTAL = 3_000
THREADS = 6
CRASH_BATCH = 200  # popped before the kill: half acked, half left in flight with a short invisible time
PHASE1_INVISIBLE_MS = 6_000  # long enough for a receive's ack, short enough to come due after the restart
CRASH_INVISIBLE_MS = 1_500  # what the un-acked half is changed to just before the kill


def produce_batches(addr: str, topic: str, bodies: list[bytes], batch: int = 100) -> None:
    with Producer(addr) as producer:
        pending = [producer.send_batch_async([Message(topic, b) for b in bodies[i:i + batch]])
                   for i in range(0, len(bodies), batch)]
        for f in pending:
            f.result(timeout=30)


def ack_refusal(future: "Future[None]") -> str | None:
    """None when the ack future succeeded, else the error's text."""
    try:
        future.result(timeout=20)
    except MQClientError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("settings", [{"flushDiskType": "SYNC_FLUSH"}, {"storeType": "defaultRocksDB"}],
                         ids=["sync-flush", "rocksdb-store"])
def test_concurrent_acks_in_order_on_the_stream_and_across_a_sigkill(tmp_path, settings: dict[str, str]):
    c = make_cluster(tmp_path, broker_names=("broker-a",), registerNameServerPeriod=1000, **settings)
    consumers: list[SimpleConsumer] = []
    try:
        topic, group = "PopAckStreamT", "pop-ack-stream"
        create(c, topic, queues=4, brokers=("broker-a",))
        bodies = [f"m{i}".encode() for i in range(TOTAL)]
        produce_batches(c.addr, topic, bodies)

        # -- phase 1: 6 threads (3 per SimpleConsumer, so their acks merge on one stream) receive and ack_async --
        received: Counter = Counter()
        lock = threading.Lock()
        valid_acks: list[tuple[list, Future]] = []
        stale_acks: list[tuple[object, Future]] = []
        errors: list[BaseException] = []
        last_pop = [time.monotonic()]
        consumers += [SimpleConsumer(c.addr, group=group, topic=topic) for _ in range(2)]

        def member(consumer: SimpleConsumer, index: int) -> None:
            try:
                deadline = time.monotonic() + 25
                confirmed: list = []  # messages of this thread whose ack already succeeded
                turn = 0
                while time.monotonic() < deadline:
                    with lock:
                        if sum(received.values()) >= TOTAL:
                            return
                    batch = consumer.receive(32, invisible_ms=PHASE1_INVISIBLE_MS, wait_ms=100)
                    if not batch:
                        continue
                    with lock:
                        received.update(m.body for m in batch)
                        last_pop[0] = time.monotonic()
                    turn += 1
                    if confirmed and turn % 3 == index % 3:
                        # An already-acked handle, sent right before this thread's valid ack: the batcher
                        # merges it with the acks the other threads of this consumer make meanwhile.
                        stale = confirmed.pop(0)
                        stale_future = consumer.ack_async(stale)
                        with lock:
                            stale_acks.append((stale, stale_future))
                    future = consumer.ack_async(batch)
                    with lock:
                        valid_acks.append((batch, future))
                    if len(confirmed) < 4:
                        future.result(timeout=20)  # acked: one of its handles may be re-acked later
                        confirmed.append(batch[0])
            except BaseException as exc:  # the main thread asserts on it
                errors.append(exc)

        threads = [threading.Thread(target=member, args=(consumers[i % 2], i)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a consumer thread did not finish"
        assert not errors, errors
        assert set(received) == set(bodies), f"{len(set(bodies) - set(received))} messages never received"
        twice = [b for b, n in received.items() if n > 1]
        assert not twice, f"{len(twice)} messages received twice, e.g. {twice[:5]}"
        failed = [(len(batch), why) for batch, f in valid_acks if (why := ack_refusal(f)) is not None]
        assert not failed, f"{len(failed)} valid ack calls failed, e.g. {failed[:3]}"
        assert sum(len(batch) for batch, _ in valid_acks) == TOTAL
        assert len(stale_acks) >= THREADS, "too few re-acks of acked handles to test"
        stale_answers = [ack_refusal(f) for _, f in stale_acks]
        assert all(why is not None and "INVALID_RECEIPT_HANDLE" in why for why in stale_answers), stale_answers
        with PullConsumer(c.addr, group=group) as reader:  # every message acked: the group's offset is the end
            wait_until(lambda: sum(reader.committed(mq) for mq in reader.queues(topic)) == TOTAL, timeout=10,
                       what="committed offsets at the end of the topic")

        # -- the same stream: valid / stale+valid / valid requests in flight together, answered each alone --
        crash_bodies = [f"k{i}".encode() for i in range(CRASH_BATCH)]
        produce_batches(c.addr, topic, crash_bodies)
        consumer = consumers[0]
        crash: list = []
        deadline = time.monotonic() + 10
        while len(crash) < CRASH_BATCH and time.monotonic() < deadline:
            crash += consumer.receive(32, invisible_ms=30_000, wait_ms=100)
        assert sorted(m.body for m in crash) == sorted(crash_bodies)
        a, b, d = crash[:10], crash[10:20], crash[20:30]
        stale = [stale_acks[0][0], valid_acks[0][0][-1]]  # acked in phase 1
        addr = consumer.client.master_addr(topic, "broker-a")
        stream = consumer.client.ack_stream(addr)

        def request(handles: list[str]) -> pop_pb2.AckMessageRequest:
            return pop_pb2.AckMessageRequest(group=group, topic=topic, receipt_handles=handles)

        mixed = [b[0].receipt_handle, stale[0].receipt_handle, *(m.receipt_handle for m in b[1:]),
                 stale[1].receipt_handle]
        answers = [stream.call(request([m.receipt_handle for m in a]), 20),
                   stream.call(request(mixed), 20),
                   stream.call(request([m.receipt_handle for m in d]), 20)]
        first, second, third = (f.result(timeout=20) for f in answers)
        assert first.code == ResponseCode.SUCCESS, first
        assert third.code == ResponseCode.SUCCESS, third
        assert second.code == ResponseCode.INVALID_RECEIPT_HANDLE, second
        assert [r.receipt_handle for r in second.results] == [stale[0].receipt_handle, stale[1].receipt_handle]
        outcomes = ack_outcomes(mixed, second)
        assert [o is None for o in outcomes] == [h not in {s.receipt_handle for s in stale} for h in mixed]
        # The valid ones of the mixed request were acked: acking them again is refused.
        again = stream.call(request([m.receipt_handle for m in b]), 20).result(timeout=20)
        assert again.code == ResponseCode.INVALID_RECEIPT_HANDLE and len(again.results) == len(b), again

        # -- SIGKILL with 100 acked and 100 in flight (short invisible time), restart on the same store --------
        rest_acked = crash[30:CRASH_BATCH // 2]
        consumer.ack(rest_acked)
        acked = {m.body for m in crash[:CRASH_BATCH // 2]}
        unacked = {m.body for m in crash[CRASH_BATCH // 2:]}
        for m in crash[CRASH_BATCH // 2:]:  # due soon after the restart, not in 30 s
            consumer.change_invisible(m, CRASH_INVISIBLE_MS)
        for con in consumers:
            con.close()
        c.brokers["broker-a"].kill()
        c.start_broker("broker-a")

        got: Counter = Counter()
        reconsumed: dict[bytes, int] = {}
        # Drain until the un-acked came back and every phase-1 invisible time passed too (an acked message whose
        # ack was lost would be due by then).
        quiet_after = last_pop[0] + PHASE1_INVISIBLE_MS / 1000 + 0.5
        with SimpleConsumer(c.addr, group=group, topic=topic) as after:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (sum(got.values()) < len(unacked) or time.monotonic() < quiet_after):
                try:
                    batch = after.receive(32, invisible_ms=30_000, wait_ms=300)
                except MQClientError:  # the route still names the killed process's address for a moment
                    time.sleep(0.1)
                    continue
                if batch:
                    after.ack(batch)
                for m in batch:
                    got[m.body] += 1
                    reconsumed[m.body] = m.reconsume_times
        lost = unacked - set(got)
        assert not lost, f"{len(lost)} un-acked messages lost across the SIGKILL, e.g. {sorted(lost)[:5]}"
        back = (set(got) & (acked | set(bodies)))
        assert not back, f"{len(back)} acked messages handed out again after the restart, e.g. {sorted(back)[:5]}"
        assert set(got) == unacked and max(got.values()) == 1, got
        assert all(n == 1 for n in reconsumed.values()), "an un-acked message came back with the wrong count"
    finally:
        for con in consumers:
            con.close()
        c.stop()
