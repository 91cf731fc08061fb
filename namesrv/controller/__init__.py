"""The replication controller inside the name server (``mqnamesrv --enable-controller``, proto/controller.proto)."""
