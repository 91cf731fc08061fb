"""A business outcome that ends a request: a response code and a remark (not found, not leader, busy, ...).

Raised anywhere below a servicer (processors and the services they call); the RPC boundary
(``common/rpc_boundary.py``) turns it into the RPC's response message, so no handler builds error responses.
"""

from common.response_code import ResponseCode, code_name

# Parts of the remarks a replica that is not (or no longer) its group's master refuses with: nothing was done, and
# the route that named it master is stale (a failover is under way), so clients look again and retry.
NOT_GROUP_MASTER = "is not its group's master"
DEPOSED_MASTER = "another replica is master now"
# A master whose controller lease ran out refuses writes (nothing stored) while the controller may elect another.
LEASE_LOST = "lost its controller lease"
# A write stored just before the lease ran out is answered so: not acknowledged, a retry may store it twice.
LEASE_ENDED_UNACKNOWLEDGED = "controller lease ended (another may be elected): stored here, not acknowledged"


def says_not_master(remark: str) -> bool:
    """Nothing was done, and the group's master is (or may soon be) another replica."""
    return NOT_GROUP_MASTER in remark or DEPOSED_MASTER in remark or LEASE_LOST in remark


def says_unacknowledged_by_lease(remark: str) -> bool:
    """Stored but not acknowledged by a master whose lease ended: a retry at the group's master is at least once."""
    return LEASE_ENDED_UNACKNOWLEDGED in remark


def says_master_changing(remark: str) -> bool:
    """A write to wait out a failover for: refused by a replica that is not (or may no longer be) master, or stored
    unacknowledged by one whose lease ended."""
    return says_not_master(remark) or says_unacknowledged_by_lease(remark)


class Refusal(Exception):
    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark

    def __repr__(self) -> str:
        return f"{type(self).__name__}({code_name(self.code)}, {self.remark!r})"
