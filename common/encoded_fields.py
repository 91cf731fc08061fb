"""Protocol-buffer fields encoded by hand, for the few big ``bytes`` fields that should be copied once.

Building a message copies a bytes field into it, and encoding the message copies it again: a pull's records
or a send's batch would be copied twice more between the store and the socket. A message's encoding followed
by more encoded fields is the encoding of the message with those fields set (protobuf merges what follows), so
big fields travel as ``header + bytes`` pieces beside the small message they belong to.
"""

from collections.abc import Sequence

WIRE_TYPE_LEN = 2


def varint(value: int) -> bytes:
    assert value >= 0, f"varint of negative {value}"
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def bytes_field(field_number: int, value: bytes) -> tuple[bytes, bytes]:
    """Field ``field_number`` (a ``bytes`` or message field) holding ``value``: (header, value)."""
    return varint(field_number << 3 | WIRE_TYPE_LEN) + varint(len(value)), value


def bytes_field_pieces(field_number: int, pieces: Sequence[bytes]) -> tuple[bytes, ...]:
    """Field ``field_number`` holding ``pieces`` back to back (records read one by one): never joined here."""
    return (varint(field_number << 3 | WIRE_TYPE_LEN) + varint(sum(map(len, pieces))), *pieces)


def repeated_message_field(field_number: int, items: Sequence[Sequence[bytes]]) -> bytes:
    """A repeated message field whose items are each given as encoded pieces, e.g. a frame of requests."""
    tag = varint(field_number << 3 | WIRE_TYPE_LEN)
    parts: list[bytes] = []
    for pieces in items:
        parts.append(tag)
        parts.append(varint(sum(map(len, pieces))))
        parts.extend(pieces)
    return b"".join(parts)
