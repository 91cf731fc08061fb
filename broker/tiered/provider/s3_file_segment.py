"""Segments in S3-compatible object storage (``tieredBackendServiceProvider=s3``), through boto3.

Design: append-as-objects. A segment ``<path>`` is the set of *chunk* objects ``<prefix>/<path>/<20-digit
start>``; each ``write(position, data)`` is one PUT of a new chunk named by its position, holding the bytes
``[position, position + len(data))``. Byte ``b`` of the segment is served by the chunk with the greatest start
``<= b`` (a later chunk shadows the tail of an earlier one); the segment ends where the last chunk ends.

Why not multipart upload: the segment model is many small positioned appends (a group commit every few hundred
milliseconds), each readable as soon as it is committed, with reads of any committed range. A multipart upload's
parts are invisible until the upload is completed, every part but the last must be >= 5 MiB, and a completed
object is immutable (appending again means a new upload copying the old object). Append-as-objects makes every
commit one PUT that is durable and readable when it returns, reads are ranged GETs of the chunks a range spans,
and nothing is ever rewritten. The Spark compaction job later merges the small sealed segments into single
one-chunk objects, which bounds the chunk count of old data.

Positioned writes: ``write(position, data)`` first deletes the chunks starting at or after ``position``, one by
one from the newest (a crash part-way leaves a shorter but gap-free stream), then PUTs the chunk at
``position``; an empty write below the end PUTs an empty chunk, which truncates.

Crash behaviour (the contract of :mod:`file_segment`): a PUT is atomic, so a crash never leaves a torn chunk.
A crash after a chunk's PUT and before the broker updates the segment's metadata leaves the backend holding
more than the record says; at restart the flat file's ``load`` takes the backend's size for the last segment
(the bytes are whole records the dispatcher wrote) and the dispatcher skips what the tier already has, so
nothing is lost or duplicated. A crash before the PUT leaves the record and the backend agreeing on the old
size; the dispatcher re-sends from there. A crash while a new segment's stale chunks are being deleted (the
``write(0, b"")`` before its record is written) leaves no record: the next attempt deletes the rest.

Every segment object caches its chunk list (one writer, the broker, owns a segment); ``real_size`` always
lists the backend again, and a read past the cached end lists again before answering short.

The Spark jobs touch runs of neighbouring segments of one directory: ``chunk_layouts`` finds all their chunks
with one listing (a compaction group's reads), and ``destroy_run`` deletes whole unreferenced segments with
batch deletes, in any order (garbage and expired segments: nothing reads them, a crash leaves remains the next
run deletes).
"""

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from broker.tiered.provider.file_segment import FileSegment
from common import tls

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef
else:
    S3Client = Any
    ObjectIdentifierTypeDef = dict

CHUNK_DIGITS = 20
DELETE_BATCH = 1000  # S3's most keys in one DeleteObjects request


@dataclass(frozen=True, slots=True)
class S3Config:
    """Where the bucket is and how to sign (``tieredStoreS3*`` keys). Picklable: the Spark jobs ship it to
    executors. ``access_key``/``secret_key`` empty: boto3's default chain (environment, profile, role)."""

    bucket: str
    endpoint: str = ""  # e.g. http://127.0.0.1:9000 (MinIO, moto); empty: AWS's own endpoint for the region
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = ""
    path_style: bool = True  # most S3-compatible servers want path-style addressing
    # CA file an https endpoint's certificate is checked against; empty: the broker's tlsClientCaPath for an
    # endpoint of its own (``endpoint`` set), else boto3's default bundle (or AWS_CA_BUNDLE)
    ca_path: str = ""

    def __repr__(self) -> str:  # never print the secret
        return f"S3Config(bucket={self.bucket!r}, endpoint={self.endpoint!r}, region={self.region!r})"


_clients: dict[tuple[S3Config, str | None], S3Client] = {}
_clients_lock = threading.Lock()


def ca_bundle(config: S3Config) -> str | None:
    """The CA file boto3 checks an https endpoint against; None: its default. The process's CA (the broker's
    tlsClientCaPath) only for an endpoint of its own: AWS's endpoints are signed by public CAs it would not hold."""
    return config.ca_path or (tls.process_ca_path() if config.endpoint else None)


def s3_client(config: S3Config) -> S3Client:
    """One client per configuration and process (boto3 clients are thread-safe; sessions are not)."""
    verify = ca_bundle(config)
    with _clients_lock:
        client = _clients.get((config, verify))
        if client is None:
            import boto3
            from botocore.config import Config

            session = boto3.session.Session()
            client = session.client(
                "s3", endpoint_url=config.endpoint or None, region_name=config.region or None,
                aws_access_key_id=config.access_key or None, aws_secret_access_key=config.secret_key or None,
                verify=verify,
                config=Config(s3={"addressing_style": "path" if config.path_style else "auto"},
                              retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32,
                              connect_timeout=10, read_timeout=60))
            _clients[(config, verify)] = client
        return client


def ensure_bucket(config: S3Config) -> bool:
    """Create the bucket if it does not exist; True if it was created. Raises if the server cannot be used."""
    from botocore.exceptions import ClientError

    client = s3_client(config)
    try:
        client.head_bucket(Bucket=config.bucket)
        return False
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    kwargs: dict[str, Any] = {"Bucket": config.bucket}
    if config.region and config.region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": config.region}
    try:
        client.create_bucket(**kwargs)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    return True


def object_key(prefix: str, path: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{path}" if prefix else path


def list_keys(config: S3Config, prefix: str, start_after: str = "") -> Iterator[tuple[str, int, datetime]]:
    """(key, size, last modified) of every object under ``prefix`` (after ``start_after``), in key order."""
    paginator = s3_client(config).get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=config.bucket, Prefix=prefix, StartAfter=start_after):
        for obj in page.get("Contents", []):
            yield obj["Key"], obj["Size"], obj["LastModified"]


def segment_of_key(key: str) -> str | None:
    """The segment key a chunk key belongs to (None if ``key`` is not a chunk)."""
    head, _, tail = key.rpartition("/")
    return head if head and len(tail) == CHUNK_DIGITS and tail.isdigit() else None


def chunk_layouts(config: S3Config, prefix: str, paths: list[str]) -> dict[str, list[tuple[int, int]]]:
    """The chunks ((start, size), by start) of each segment in ``paths``, all in one directory, from one listing
    that starts at the first and stops past the last. A compaction reads runs of neighbouring segments: one LIST
    a run (a page per thousand chunks) rather than one a segment. A segment with no chunk maps to []."""
    layouts: dict[str, list[tuple[int, int]]] = {path: [] for path in paths}
    if not paths:
        return layouts
    keys = {object_key(prefix, path): path for path in paths}
    directories = {key.rpartition("/")[0] for key in keys}
    if len(directories) != 1:
        raise ValueError(f"segments of one directory expected, got {sorted(directories)}")
    # Past every chunk key ("<key>/<digits>"; '~' sorts after the digits). Not max(keys) + "/~": "<p>.retired"
    # sorts after "<p>" but before "<p>/<digits>" ('.' < '/').
    stop_after = max(key + "/~" for key in keys)
    # StartAfter the first segment's own key: its chunks ("<key>/<start>") sort right after it.
    for key, size, _ in list_keys(config, directories.pop() + "/", start_after=min(keys)):
        if key > stop_after:
            break
        segment = segment_of_key(key)
        if segment in keys:
            layouts[keys[segment]].append((int(key[len(segment) + 1:]), size))
    for chunks in layouts.values():
        chunks.sort()
    return layouts


def destroy_run(config: S3Config, prefix: str, paths: list[str]) -> list[int]:
    """Delete whole segments of one directory that nothing reads any more (garbage, expired): one listing, then
    one DeleteObjects request a thousand chunks, rather than a listing and a DELETE a chunk. The chunks go in no
    particular order, so unlike :meth:`S3FileSegment.destroy` a crash part-way can leave a segment with a gap:
    only for segments no record references, whose remains the next run lists and deletes. Returns each
    segment's size before (0: it was gone already)."""
    layouts = chunk_layouts(config, prefix, paths)
    keys = [f"{object_key(prefix, path)}/{start:0{CHUNK_DIGITS}d}" for path in paths for start, _ in layouts[path]]
    client = s3_client(config)
    for i in range(0, len(keys), DELETE_BATCH):
        batch: list[ObjectIdentifierTypeDef] = [{"Key": key} for key in keys[i : i + DELETE_BATCH]]
        errors = client.delete_objects(Bucket=config.bucket, Delete={"Objects": batch, "Quiet": True}).get("Errors")
        if errors:
            first = errors[0]
            raise OSError(f"s3 refused to delete {len(errors)} of {len(batch)} chunks, first {first.get('Key')}: "
                          f"{first.get('Code')} {first.get('Message')}")
    return [S3FileSegment._end(layouts[path]) for path in paths]


class S3FileSegment(FileSegment):
    def __init__(self, config: S3Config, prefix: str, path: str,
                 chunks: list[tuple[int, int]] | None = None) -> None:
        """``chunks``: the layout if the caller listed it already (:func:`chunk_layouts`); else the first use
        lists it."""
        super().__init__(path)
        self.config = config
        self._base = object_key(prefix, path) + "/"
        self._chunks: list[tuple[int, int]] | None = chunks  # (start, size), by start
        self._lock = threading.Lock()

    @property
    def _client(self) -> S3Client:
        return s3_client(self.config)

    def _key(self, start: int) -> str:
        return f"{self._base}{start:0{CHUNK_DIGITS}d}"

    def _list(self) -> list[tuple[int, int]]:
        chunks = []
        for key, size, _ in list_keys(self.config, self._base):
            tail = key[len(self._base):]
            if len(tail) == CHUNK_DIGITS and tail.isdigit():
                chunks.append((int(tail), size))
        chunks.sort()
        self._chunks = chunks
        return chunks

    def _layout(self) -> list[tuple[int, int]]:
        return self._chunks if self._chunks is not None else self._list()

    @staticmethod
    def _end(chunks: list[tuple[int, int]]) -> int:
        return chunks[-1][0] + chunks[-1][1] if chunks else 0

    def real_size(self) -> int:
        with self._lock:
            return self._end(self._list())

    def write(self, position: int, data: bytes) -> None:
        with self._lock:
            chunks = self._layout()
            end = self._end(chunks)
            if position > end:
                raise ValueError(f"{self.path}: write at {position} past the end {end}")
            while chunks and chunks[-1][0] >= position:  # newest first: a crash leaves a gap-free prefix
                self._client.delete_object(Bucket=self.config.bucket, Key=self._key(chunks[-1][0]))
                chunks.pop()
            if data or position < self._end(chunks):  # an empty chunk below the end truncates there
                self._client.put_object(Bucket=self.config.bucket, Key=self._key(position), Body=data)
                chunks.append((position, len(data)))

    def _spans(self, chunks: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(chunk start, from, to) of the bytes ``[lo, hi)``: each byte from the newest chunk that holds it."""
        out = []
        for i, (start, size) in enumerate(chunks):
            stop = min(start + size, chunks[i + 1][0]) if i + 1 < len(chunks) else start + size
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                out.append((start, a, b))
        return out

    def read(self, position: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with self._lock:
            chunks = self._layout()
            if position + length > self._end(chunks):  # maybe written by another process since: look again
                chunks = self._list()
            spans = self._spans(chunks, position, position + length)
        out = []
        for start, a, b in spans:
            body = self._client.get_object(Bucket=self.config.bucket, Key=self._key(start),
                                           Range=f"bytes={a - start}-{b - start - 1}")["Body"]
            try:
                out.append(body.read())
            finally:
                body.close()
        return b"".join(out)

    def destroy(self) -> None:
        with self._lock:
            chunks = self._list()
            while chunks:  # newest first, as in write
                self._client.delete_object(Bucket=self.config.bucket, Key=self._key(chunks[-1][0]))
                chunks.pop()
