"""Builds segments for the configured backend (``tieredBackendServiceProvider``)."""

from enum import StrEnum
from pathlib import Path

from broker.tiered.provider.file_segment import FileSegment, FileSegmentType


class TieredBackendServiceProvider(StrEnum):
    """``tieredBackendServiceProvider``: where the tier's objects live."""

    POSIX = "posix"  # files under ``tieredStoreFilePath`` (the Spark jobs read and write these)
    MEMORY = "memory"  # process memory: for tests, gone on restart


def segment_path(broker_name: str, topic: str, queue_id: int, file_type: FileSegmentType, base_offset: int) -> str:
    """``<broker>/<topic>/<queue>/<commitlog|consumequeue>/<20-digit base offset>``: one queue's objects together,
    named by their first offset as local segments are."""
    return f"{broker_name}/{topic}/{queue_id}/{file_type.dir_name}/{base_offset:020d}"


class FileSegmentFactory:
    def __init__(self, provider: TieredBackendServiceProvider, root: Path) -> None:
        if not isinstance(provider, TieredBackendServiceProvider):  # parsed once (broker.conf)
            raise TypeError(f"TieredBackendServiceProvider member expected, got {provider!r}")
        self.provider = provider
        self.root = root

    def open(self, path: str) -> FileSegment:
        if self.provider is TieredBackendServiceProvider.MEMORY:
            from broker.tiered.provider.memory_file_segment import MemoryFileSegment

            return MemoryFileSegment(str(self.root), path)
        from broker.tiered.provider.posix_file_segment import PosixFileSegment

        return PosixFileSegment(self.root, path)
