"""What a broker's tier does in its role (controller mode: a replica may be promoted, so it has a tier too).

A replica does not know at first whether it shares its master's backend. Its first copy of the master's metadata
(``slave_synchronize.py``, with the other tables) says, by the id each backend holds (``tier_id.py``):
- not shared (the default posix tier under each broker's store): the replica uploads its own copy of the log to its
  own backend, as a master does, and its commitlog expires once its own tier holds what it drops;
- shared (one S3 bucket and prefix, one mounted directory): only the master writes there. The replica installs each
  copy of the master's records (its reads follow them), drops what they say is uploaded from its own upload queue,
  and keeps on disk and in memory only what the master has not uploaded yet. Promoted, it takes the tier over
  from the last copy: objects the master expired since are dropped from the records, segments it opened since are
  adopted (so they are appended to, never opened anew and truncated), and it uploads what the master had not.
The master's copy lags by up to one copy interval; everything above is what makes that lag harmless."""

from dataclasses import dataclass
from enum import Enum

from broker.tiered.metadata.tiered_metadata_store import TieredMetadataCopy


class TierRole(Enum):
    WAITING = "waiting"  # a replica that has no copy of its master's tier yet: it keeps every record for upload
    OWN = "own"  # a replica with a backend of its own: uploads its copy of the log there
    SHARED = "shared"  # a replica sharing its master's backend: follows the master's records
    MASTER = "master"


@dataclass(frozen=True, slots=True)
class MasterTier:
    """A master's answer to its replica: its backend's id and its metadata."""

    tier_id: str  # "": not written yet (its backend was failing): the replica waits for the next copy
    copy: TieredMetadataCopy
