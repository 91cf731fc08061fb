"""``python -m cluster``: the same as ``python -m cluster.local_cluster``."""

import sys

from cluster.local_cluster import main

sys.exit(main())
