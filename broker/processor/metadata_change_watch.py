"""A slave's watch on its master's metadata (``WaitMetadataChange``): the versions of what a promoted slave needs to
serve what was acknowledged (topic configs: sends, pulls, delayed deliveries, transactions; static topic mappings:
static topics and the KV store; subscription groups: a FIFO group's order, retry limits; ACL users and policies: who
may call a promoted slave at all), answered as soon as they differ from the slave's copy. A slave copies them then,
within milliseconds of a change, rather than at its next periodic copy (seconds later, a window in which a master's
death lost a topic made in it and every delayed message or KV shard that needed it)."""

import asyncio
import time
from collections.abc import Callable

from broker.metadata.data_version import DataVersion
from proto import broker_pb2, common_pb2

MAX_WAIT_MS = 5_000
POLL_S = 0.01  # versions are two counters: reading them every 10 ms costs the loop nothing a slave would notice


def metadata_versions(topics: DataVersion, mappings: DataVersion, groups: DataVersion,
                      acls: DataVersion | None = None) -> broker_pb2.MetadataVersions:
    """``acls`` None (ACL off): an empty version, which never moves."""
    return broker_pb2.MetadataVersions(topics=version_proto(topics), mappings=version_proto(mappings),
                                       groups=version_proto(groups),
                                       acls=version_proto(acls) if acls is not None else common_pb2.DataVersion())


def version_proto(version: DataVersion) -> common_pb2.DataVersion:
    return common_pb2.DataVersion(state_version=version.state_version, counter=version.counter)


async def wait_metadata_change(request: broker_pb2.MetadataChangeRequest,
                               current: Callable[[], broker_pb2.MetadataVersions]) -> broker_pb2.MetadataVersions:
    """The current versions once they differ from ``request.known``, or after ``request.wait_ms`` (capped)."""
    deadline = time.monotonic() + min(max(request.wait_ms, 0), MAX_WAIT_MS) / 1000
    while True:
        versions = current()
        if not request.known.HasField("acls"):
            versions.ClearField("acls")  # a slave that copies no ACL tables (ACL off there, an older release)
        if versions != request.known or time.monotonic() >= deadline:
            return versions
        await asyncio.sleep(POLL_S)
