"""Every SDK error is an MQClientError whose message says what failed."""


class MQClientError(Exception):
    """Base class of SDK errors; ``code`` is the broker's response code when there was one, ``status`` the gRPC
    status name when the call itself failed (e.g. ``UNAUTHENTICATED``)."""

    def __init__(self, message: str, code: int | None = None, status: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
