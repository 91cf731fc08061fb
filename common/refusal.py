"""A business outcome that ends a request: a response code and a remark (not found, not leader, busy, ...).

Raised anywhere below a servicer (processors and the services they call); the RPC boundary
(``common/rpc_boundary.py``) turns it into the RPC's response message, so no handler builds error responses.
"""

from common.response_code import ResponseCode, code_name

# Parts of the remarks a replica that is not (or no longer) its group's master refuses with: nothing was done, and
# the route that named it master is stale (a failover is under way), so clients look again and retry.
NOT_GROUP_MASTER = "is not its group's master"
DEPOSED_MASTER = "another replica is master now"


def says_not_master(remark: str) -> bool:
    return NOT_GROUP_MASTER in remark or DEPOSED_MASTER in remark


class Refusal(Exception):
    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark

    def __repr__(self) -> str:
        return f"{type(self).__name__}({code_name(self.code)}, {self.remark!r})"
