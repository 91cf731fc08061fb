"""mqadmin: the admin command line (click), one module per command group, built on ``client.Admin``."""

import os

# Before gRPC loads: its core logs a failed TLS handshake at INFO on stderr, and mqadmin's failures are one line.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
