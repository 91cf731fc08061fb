"""Transactional messages (upstream's model): half messages, EndTransaction, and the check service."""
