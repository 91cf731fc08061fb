"""Replicas with an S3 tier share one moto server process (``tests/s3_server.py``)."""

from tests.s3_server import s3_server

__all__ = ["s3_server"]
