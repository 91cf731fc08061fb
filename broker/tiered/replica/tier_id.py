"""Which backend a tier writes to, as an id stored in the backend itself. A controller-mode replica compares its
master's id with the one its own backend holds to learn whether the two share one backend (one bucket and prefix,
one mounted directory) or each has its own: paths cannot tell, one directory name on two machines is two disks, or
one network mount. Only a master writes the id (once, when its tier starts and none is there); replicas read it."""

import logging
import uuid

from broker.tiered.provider.file_segment_factory import FileSegmentFactory

log = logging.getLogger(__name__)

ID_BYTES = 32  # uuid4 hex


def tier_id_path(broker_name: str) -> str:
    """Beside the broker's directory of segments, not in it: the Spark jobs' garbage collection lists that one."""
    return f"{broker_name}.tier_id"


def read_tier_id(factory: FileSegmentFactory, broker_name: str) -> str:
    """The id the backend holds for this broker's tier ("" if none)."""
    return factory.open(tier_id_path(broker_name)).read(0, ID_BYTES).decode("ascii", "replace")


def ensure_tier_id(factory: FileSegmentFactory, broker_name: str) -> str:
    """The backend's id, written first when it has none."""
    found = read_tier_id(factory, broker_name)
    if len(found) == ID_BYTES:
        return found
    factory.open(tier_id_path(broker_name)).write(0, uuid.uuid4().hex.encode("ascii"))
    found = read_tier_id(factory, broker_name)
    log.info("tier_id_written broker=%s id=%s", broker_name, found)
    return found
