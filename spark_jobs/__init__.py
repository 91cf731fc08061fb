"""PySpark jobs over a broker's tier: compact, cleanup, read.

gRPC's fork handlers break PySpark's launch of its JVM when a channel is open (``epoll_wait error`` then
JAVA_GATEWAY_EXITED); the jobs do not fork with channels in use, so they turn the handlers off before gRPC
is imported.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
