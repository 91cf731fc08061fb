"""Every SDK error is an MQClientError whose message says what failed."""


class MQClientError(Exception):
    """Base class of SDK errors; ``code`` is the broker's response code when there was one, ``status`` the gRPC
    status name when the call itself failed (e.g. ``UNAUTHENTICATED``)."""

    def __init__(self, message: str, code: int | None = None, status: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def partly_applied(exc: MQClientError, done: list[str], not_tried: list[str]) -> MQClientError:
    """``exc`` of a write to several brokers, saying where it was applied before it failed (an operator's retry
    then knows what it repeats)."""
    if not done and not not_tried:
        return exc
    said = [f"done on {', '.join(done)}" if done else "done nowhere",
            *([f"not tried on {', '.join(not_tried)}"] if not_tried else [])]
    return MQClientError(f"{exc} ({'; '.join(said)})", exc.code, exc.status)
