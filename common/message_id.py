"""Message ids: the store host and the commitlog offset, so an id alone finds its record."""

import socket
import struct

_ID = struct.Struct(">4sIq")


def encode_host(address: str) -> bytes:
    """``"ip:port"`` as 8 bytes (IPv4 + port), the form records carry."""
    host, _, port = address.rpartition(":")
    try:
        return socket.inet_aton(host or "127.0.0.1") + struct.pack(">I", int(port or 0))
    except (OSError, ValueError) as exc:
        raise ValueError(f"host {address!r} is not IPv4 'ip:port'") from exc


def decode_host(raw: bytes) -> str:
    return f"{socket.inet_ntoa(raw[:4])}:{struct.unpack('>I', raw[4:8])[0]}"


def make_message_id(store_host: bytes, physical_offset: int) -> str:
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()


def parse_message_id(msg_id: str) -> tuple[str, int]:
    """(store address, commitlog offset) of a message id; ValueError if it is not one."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise ValueError(f"message id {msg_id!r} is not hex") from exc
    if len(raw) != _ID.size:
        raise ValueError(f"message id {msg_id!r} is not {_ID.size * 2} hex chars")
    ip, port, offset = _ID.unpack(raw)
    return f"{socket.inet_ntoa(ip)}:{port}", offset
