"""The proxy's processors, one per role of upstream's proxy: route, send, consume, client (heartbeat, telemetry
settings), assignment and transaction. Each takes decoded v2 requests and answers v2 responses, raising
``ProxyError`` for what the servicer answers as a non-OK status."""
