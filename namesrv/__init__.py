"""The name server (mqnamesrv): broker registry and topic routes."""
