"""Builds segments for the configured backend (``tieredBackendServiceProvider``)."""

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from broker.tiered.provider.file_segment import FileSegment, FileSegmentType

if TYPE_CHECKING:
    from broker.tiered.provider.s3_file_segment import S3Config


class TieredBackendServiceProvider(StrEnum):
    """``tieredBackendServiceProvider``: where the tier's objects live."""

    POSIX = "posix"  # files under ``tieredStoreFilePath`` (the Spark jobs read and write these)
    MEMORY = "memory"  # process memory: for tests, gone on restart
    S3 = "s3"  # S3-compatible object storage (``tieredStoreS3*`` keys); the Spark jobs read and write it too


def segment_path(broker_name: str, topic: str, queue_id: int, file_type: FileSegmentType, base_offset: int) -> str:
    """``<broker>/<topic>/<queue>/<commitlog|consumequeue>/<20-digit base offset>``: one queue's objects together,
    named by their first offset as local segments are."""
    return f"{broker_name}/{topic}/{queue_id}/{file_type.dir_name}/{base_offset:020d}"


class FileSegmentFactory:
    """``root``: the directory (posix), the namespace (memory) or the key prefix in the bucket (s3, where
    ``s3`` says which server and bucket)."""

    def __init__(self, provider: TieredBackendServiceProvider, root: Path | str, s3: "S3Config | None" = None) -> None:
        if not isinstance(provider, TieredBackendServiceProvider):  # parsed once (broker.conf)
            raise TypeError(f"TieredBackendServiceProvider member expected, got {provider!r}")
        if provider is TieredBackendServiceProvider.S3 and s3 is None:
            raise ValueError("the s3 backend needs its S3Config (tieredStoreS3Bucket, ...)")
        self.provider = provider
        self.root = root
        self.s3 = s3

    def list_objects(self, under: str) -> dict[str, float]:
        """Every object whose path starts with ``under/`` -> when it was last written (epoch seconds). For the
        Spark jobs' garbage collection."""
        if self.provider is TieredBackendServiceProvider.S3:
            from broker.tiered.provider.s3_file_segment import list_keys, object_key, segment_of_key

            assert self.s3 is not None
            base = object_key(str(self.root), "")
            out: dict[str, float] = {}
            for key, _, modified in list_keys(self.s3, object_key(str(self.root), under.strip("/")) + "/"):
                seg = segment_of_key(key)
                if seg is not None:
                    path = seg[len(base):]
                    out[path] = max(out.get(path, 0.0), modified.timestamp())
            return out
        if self.provider is TieredBackendServiceProvider.MEMORY:
            from broker.tiered.provider import memory_file_segment

            return memory_file_segment.list_objects(str(self.root), under)
        root = Path(self.root)
        out = {}
        for dirpath, _, names in os.walk(root / under):
            for name in names:
                file = Path(dirpath) / name
                try:
                    out[str(file.relative_to(root))] = file.stat().st_mtime
                except FileNotFoundError:
                    continue
        return out

    def open_run(self, paths: list[str]) -> list[FileSegment]:
        """Segments of one directory, to be read together: on s3 one listing finds all their chunks (see
        :func:`~broker.tiered.provider.s3_file_segment.chunk_layouts`); elsewhere as :meth:`open` each."""
        if self.provider is not TieredBackendServiceProvider.S3:
            return [self.open(path) for path in paths]
        from broker.tiered.provider.s3_file_segment import S3FileSegment, chunk_layouts

        assert self.s3 is not None
        layouts = chunk_layouts(self.s3, str(self.root), paths)
        return [S3FileSegment(self.s3, str(self.root), path, layouts[path]) for path in paths]

    def destroy_run(self, paths: list[str]) -> list[int]:
        """Delete segments of one directory that nothing reads any more; returns each one's size before. On s3
        one listing and batch deletes, in no particular order (see
        :func:`~broker.tiered.provider.s3_file_segment.destroy_run`); elsewhere :meth:`FileSegment.destroy` each."""
        if self.provider is TieredBackendServiceProvider.S3:
            from broker.tiered.provider.s3_file_segment import destroy_run

            assert self.s3 is not None
            return destroy_run(self.s3, str(self.root), paths)
        sizes = []
        for path in paths:
            segment = self.open(path)
            sizes.append(segment.real_size())
            segment.destroy()
        return sizes

    def open(self, path: str) -> FileSegment:
        if self.provider is TieredBackendServiceProvider.S3:
            from broker.tiered.provider.s3_file_segment import S3FileSegment

            assert self.s3 is not None
            return S3FileSegment(self.s3, str(self.root), path)
        if self.provider is TieredBackendServiceProvider.MEMORY:
            from broker.tiered.provider.memory_file_segment import MemoryFileSegment

            return MemoryFileSegment(str(self.root), path)
        from broker.tiered.provider.posix_file_segment import PosixFileSegment

        return PosixFileSegment(Path(self.root), path)
