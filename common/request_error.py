"""A malformed request: the RPC boundary turns it into gRPC INVALID_ARGUMENT with this message."""


class RequestError(ValueError):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise RequestError(message)
