"""KvStore's reads: a big get on RocksDB runs on a read thread (its multi-get releases the GIL, so it overlaps the
event loop's work), a small one and any get of the in-memory store on the loop; answers are the state's either
way; closing waits for a read in flight before the database closes."""

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.kv.kv_record import present
from broker.kv.kv_state_store import KvStoreType
from broker.kv.kv_store import OFF_LOOP_GET_KEYS, KvStore
from broker.store.config import FlushDiskType
from broker.store.message_store import MessageStore
from tests.store.conftest import store_config

PARTITIONS = 4


@pytest.fixture(params=list(KvStoreType), ids=[t.value for t in KvStoreType])
def kv_type(request: pytest.FixtureRequest) -> KvStoreType:
    return request.param


def open_kv(root: Path, kv_type: KvStoreType) -> tuple[MessageStore, KvStore]:
    store = MessageStore(store_config(root / "store", flush_disk_type=FlushDiskType.ASYNC_FLUSH))
    kv = KvStore(kv_type, root / "kv", 3600, "broker-test")
    kv.attach(store, asyncio.get_running_loop(), lambda: None)  # type: ignore[arg-type, return-value]
    store.start()
    return store, kv


def close(store: MessageStore, kv: KvStore) -> None:
    store.shutdown()
    kv.close()


def keys(n: int) -> list[bytes]:
    return [b"key-%04d" % i for i in range(n)]


class ThreadRecorder:
    """Wraps a state's read: records the thread each call ran on; ``hold`` makes calls wait for ``release``."""

    def __init__(self, kv: KvStore, method: str) -> None:
        self.read = getattr(kv.state, method)
        self.threads: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        setattr(kv.state, method, self)

    def __call__(self, *args: object) -> list[bytes | None]:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(10)
        return self.read(*args)


def filled(kv: KvStore, n: int) -> dict[tuple[int, bytes], bytes]:
    writes = {(i % PARTITIONS, key): present(b"value-" + key) for i, key in enumerate(keys(n))}
    kv.state.apply(writes, 1)
    return writes


@pytest.mark.parametrize("n", [1, OFF_LOOP_GET_KEYS - 1, OFF_LOOP_GET_KEYS, 300])
def test_gets_answer_the_state_and_only_big_rocksdb_gets_leave_the_loop(tmp_path: Path, kv_type: KvStoreType,
                                                                        n: int) -> None:
    async def main() -> None:
        store, kv = open_kv(tmp_path, kv_type)
        try:
            writes = filled(kv, n)
            partitions = [p for p, _ in writes]
            ks = [k for _, k in writes]
            each, one = ThreadRecorder(kv, "get_each"), ThreadRecorder(kv, "get")
            assert await kv.get_each(partitions, ks) == list(writes.values())
            assert await kv.get(0, ks) == [writes.get((0, k)) for k in ks]
            off_loop = kv_type is KvStoreType.ROCKSDB and n >= OFF_LOOP_GET_KEYS
            loop_thread = threading.current_thread().name
            for recorder in (each, one):
                assert len(recorder.threads) == 1
                assert recorder.threads[0].startswith("kv-read") is off_loop, recorder.threads
                assert (recorder.threads[0] == loop_thread) is not off_loop
        finally:
            close(store, kv)

    asyncio.run(main())


def test_close_waits_for_a_read_in_flight(tmp_path: Path) -> None:
    """The RocksDB database is closed only after a read on a read thread has returned (a read of a closed
    database could crash the broker)."""
    async def main() -> None:
        store, kv = open_kv(tmp_path, KvStoreType.ROCKSDB)
        writes = filled(kv, OFF_LOOP_GET_KEYS)
        each = ThreadRecorder(kv, "get_each")
        each.release.clear()
        partitions, ks = [p for p, _ in writes], [k for _, k in writes]
        reading = asyncio.create_task(kv.get_each(partitions, ks))
        assert await asyncio.to_thread(each.entered.wait, 10)
        closing = asyncio.create_task(asyncio.to_thread(close, store, kv))
        await asyncio.sleep(0.3)  # time enough for a close that did not wait to close the database
        assert not closing.done()
        each.release.set()
        got = await reading
        assert got == list(writes.values())
        await closing

    asyncio.run(main())


@pytest.fixture(autouse=True)
def no_read_threads_left() -> Iterator[None]:
    yield
    assert not [t for t in threading.enumerate() if t.name.startswith("kv-read")]
