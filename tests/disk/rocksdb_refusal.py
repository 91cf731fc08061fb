"""What rocksdict raises when RocksDB meets a full disk (a bare Exception carrying RocksDB's status; seen when the
consume queue's memtable flush met one): for tests that make a store refuse as a full disk does."""


def rocksdb_disk_full(file: str = "000009.sst") -> Exception:
    """A new one per call, as each refused write raises its own."""
    return Exception(f"IO error: No space left on device: While appending to file: {file}: No space left on device")
