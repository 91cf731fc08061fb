"""How long a name server keeps a broker it has not heard from: the broker's own heartbeat timeout when it sent one
(brokerNotActiveTimeoutMillis), else the name server's default (``mqnamesrv --broker-expiry-ms``)."""

DEFAULT_BROKER_EXPIRY_MS = 120_000
