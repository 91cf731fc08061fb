"""What rocksdict raises when RocksDB meets a full disk (a bare Exception carrying RocksDB's status; seen when the
consume queue's memtable flush met one): for tests that make a store refuse as a full disk does."""


def rocksdb_disk_full(file: str = "000009.sst") -> Exception:
    """A new one per call, as each refused write raises its own."""
    return Exception(f"IO error: No space left on device: While appending to file: {file}: No space left on device")


class RefusingDb:
    """A RocksDB database (an ``Rdict``) whose ``method`` is refused as on a full disk while ``refusing``, and only
    ``times`` times (None: until told); every other call goes through."""

    def __init__(self, db: object, method: str, times: int | None = None) -> None:
        self.db = db
        self.method = method
        self.times = times
        self.refusing = True

    def __getattr__(self, name: str) -> object:
        call = getattr(self.db, name)
        if name != self.method:
            return call

        def refused_while_refusing(*args: object, **kwargs: object) -> object:
            if self.refusing and self.times != 0:
                if self.times is not None:
                    self.times -= 1
                raise rocksdb_disk_full()
            return call(*args, **kwargs)

        return refused_while_refusing
