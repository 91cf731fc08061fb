"""The CRC-32 of a record's variable part (topic, properties, body): zlib's polynomial and values, computed by
zlib-ng, which folds with carry-less multiplication (PCLMULQDQ) where the CPU has it.

It is on every record's path: the producer computes it, the broker checks each record of a batch, recovery
checks every record it scans. Measured on this machine's kind: 0.31 us against zlib's 0.85 us for a 1.2 KiB
record, 7.6 GB/s against 2.0 GB/s on 1 MiB."""

from zlib_ng.zlib_ng import crc32

__all__ = ["crc32"]
