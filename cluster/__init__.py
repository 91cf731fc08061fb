"""Launchers for a local cluster: ``python -m cluster.local_cluster`` (what ``make run`` starts)."""
