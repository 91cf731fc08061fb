"""``mqproxy``: the RocketMQ 5 proxy. It serves ``apache.rocketmq.v2.MessagingService`` (the protocol of the official
RocketMQ 5 clients) over this cluster and forwards to the brokers with the project's own gRPC; it keeps no state
of its own beyond open telemetry streams, so several may run side by side.

A request goes ``messaging_servicer.py`` (decode, call, encode) -> ``processor/*`` (by role: route, send,
consume, client/telemetry, assignment, transaction) -> the SDK's producer and route cache, and the brokers'
``rmq.PopService``."""
