"""A business outcome that ends a request: a response code and a remark (not found, not leader, busy, ...).

Raised anywhere below a servicer (processors and the services they call); the RPC boundary
(``common/rpc_boundary.py``) turns it into the RPC's response message, so no handler builds error responses.
"""

from common.response_code import ResponseCode, code_name


class Refusal(Exception):
    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark

    def __repr__(self) -> str:
        return f"{type(self).__name__}({code_name(self.code)}, {self.remark!r})"
