"""Builds segments for the configured backend (``tieredBackendServiceProvider``)."""

from pathlib import Path

from broker.tiered.provider.file_segment import FileSegment, FileSegmentType

PROVIDERS = ("posix", "memory")


def segment_path(broker_name: str, topic: str, queue_id: int, file_type: FileSegmentType, base_offset: int) -> str:
    """``<broker>/<topic>/<queue>/<commitlog|consumequeue>/<20-digit base offset>``: one queue's objects together,
    named by their first offset as local segments are."""
    return f"{broker_name}/{topic}/{queue_id}/{file_type.dir_name}/{base_offset:020d}"


class FileSegmentFactory:
    def __init__(self, provider: str, root: Path) -> None:
        assert provider in PROVIDERS, provider
        self.provider = provider
        self.root = root

    def open(self, path: str) -> FileSegment:
        if self.provider == "memory":
            from broker.tiered.provider.memory_file_segment import MemoryFileSegment

            return MemoryFileSegment(str(self.root), path)
        from broker.tiered.provider.posix_file_segment import PosixFileSegment

        return PosixFileSegment(self.root, path)
