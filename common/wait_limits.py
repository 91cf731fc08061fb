"""The longest waits a broker allows, checked by the broker and known to the SDK, which bounds its own deadlines by
them: a long poll (a pull's suspend, a receive's wait) is held at most ``longPollingMaxSuspendMs``, itself at most
:data:`MAX_SUSPEND_MS`; a POP delivery stays invisible at most :data:`MAX_INVISIBLE_MS`."""

MAX_SUSPEND_MS = 600_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # upstream proxy's longest invisible time
