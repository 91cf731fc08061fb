"""A KV operation as a commitlog record of the system topic rmq_sys_KV.

Properties (RIP-22): ``KV_OP`` (PUT, DEL, CAS) and ``KV_KEY`` (the key, base64). The body is a format
byte (1; it also keeps a delete's body non-empty) then the value; for CAS, after the format byte, ``>ii``
(expected length or -1 for "expect absent", base length or -1) then expected, base and the new value.
The base is what older brokers of the shard held for the key when the leader had nothing (after a
remap); carrying it in the record keeps CAS decided at apply time and replayable.
"""

import binascii
import struct
from dataclasses import dataclass
from enum import Enum

from common.kv_shard import MAX_VALUE_BYTES
from common.message_properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, find_property

CAS_HEAD = struct.Struct(">ii")

_SEP, _END = NAME_VALUE_SEPARATOR.encode(), PROPERTY_SEPARATOR.encode()
OP_NEEDLE = b"KV_OP" + _SEP
KEY_NEEDLE = b"KV_KEY" + _SEP
FORMAT = b"\x01"
# The largest body: format byte, CAS head, and expected, base and new value at their limit.
MAX_BODY_BYTES = 1 + CAS_HEAD.size + 3 * (MAX_VALUE_BYTES + 1)


class KvOp(Enum):
    PUT = b"PUT"
    DELETE = b"DEL"
    CAS = b"CAS"


# Raw state of a key in a partition, as stored: a tombstone is kept so reads do not fall back past it.
DELETED = b"\x00"
PRESENT_TAG = 0x01


def present(value: bytes) -> bytes:
    return b"\x01" + value


def value_of(raw: bytes | None) -> bytes | None:
    """The value a raw state stands for: None when absent or deleted."""
    return raw[1:] if raw is not None and raw[0] == PRESENT_TAG else None


@dataclass(slots=True)
class KvRecord:
    op: KvOp
    key: bytes
    value: bytes = b""
    expected: bytes | None = None  # CAS: None means "the key must be absent"
    base: bytes | None = None  # CAS: raw state found on older brokers, None if not looked up or absent

    def encode(self) -> tuple[bytes, bytes]:
        """``(properties, body)`` for the commitlog."""
        props = _PROPERTIES_HEAD[self.op] + binascii.b2a_base64(self.key, newline=False) + _END
        if self.op is not KvOp.CAS:
            return props, FORMAT + self.value
        expected, base = self.expected, self.base
        head = CAS_HEAD.pack(-1 if expected is None else len(expected), -1 if base is None else len(base))
        return props, b"".join((FORMAT, head, expected or b"", base or b"", self.value))


_OPS = {op.value: op for op in KvOp}
# Everything of the properties before the key, per op: encoded once (an enum's value is slow to read per put).
_PROPERTIES_HEAD = {op: OP_NEEDLE + op.value + _END + KEY_NEEDLE for op in KvOp}
# What KvRecord.encode writes: ``KV_OP\x01XXX\x02KV_KEY\x01<base64>\x02`` (read without searching).
_OP_AT, _KEY_AT = len(OP_NEEDLE), len(OP_NEEDLE) + 3 + len(_END + KEY_NEEDLE)
_OP_OF_HEAD = {head: op for op, head in _PROPERTIES_HEAD.items()}


def decode(properties: bytes, body: bytes) -> KvRecord:
    """The inverse of :meth:`KvRecord.encode` (tools, tests). The KV dispatcher takes the same steps without the
    record object: :func:`op_and_key`, :func:`check_format`, and :func:`decode_cas` only for a CAS."""
    op, key = op_and_key(properties)
    check_format(body)
    if op is not KvOp.CAS:
        return KvRecord(op, key, body[1:])
    return decode_cas(key, body)


def op_and_key(properties: bytes) -> tuple[KvOp, bytes]:
    """A record's op and key: read at their fixed positions in what :meth:`KvRecord.encode` writes (the only
    separator after the key's start is the last byte), searched for in any other properties."""
    op = _OP_OF_HEAD.get(properties[:_KEY_AT])
    if op is not None and properties.find(_END, _KEY_AT) == len(properties) - 1:
        return op, binascii.a2b_base64(properties[_KEY_AT:-1])
    return _decode_properties(properties)


def check_format(body: bytes) -> None:
    assert body[:1] == FORMAT, f"KV record body format {body[:1]!r} unknown"


# A put's body (format byte, value) is the value's raw state, byte for byte: applying a put stores its body.
assert FORMAT[0] == PRESENT_TAG


def _decode_properties(properties: bytes) -> tuple[KvOp, bytes]:
    op_raw, key_raw = find_property(properties, OP_NEEDLE), find_property(properties, KEY_NEEDLE)
    assert op_raw is not None and key_raw is not None, "KV record without KV_OP or KV_KEY"
    return _op(bytes(op_raw)), binascii.a2b_base64(key_raw)


def _op(raw: bytes) -> KvOp:
    op = _OPS.get(raw)
    if op is None:
        raise ValueError(f"unknown KV op {raw!r}")
    return op


def decode_cas(key: bytes, body: bytes) -> KvRecord:
    expected_len, base_len = CAS_HEAD.unpack_from(body, 1)
    pos = 1 + CAS_HEAD.size
    expected = None
    if expected_len >= 0:
        expected, pos = bytes(body[pos : pos + expected_len]), pos + expected_len
    base = None
    if base_len >= 0:
        base, pos = bytes(body[pos : pos + base_len]), pos + base_len
    return KvRecord(KvOp.CAS, key, bytes(body[pos:]), expected, base)
