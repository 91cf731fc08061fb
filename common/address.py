"""``host:port`` addresses the SDK and mqadmin are given: checked before gRPC sees them, since gRPC takes a port
modulo 65536 (127.0.0.1:99999 would reach 127.0.0.1:34463) and reports a bad one only when it resolves it."""

MAX_PORT = 65535


def check_address(addr: str) -> str:
    """``addr`` if it is ``host:port`` with a port in 1..65535; else ValueError saying what is wrong."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{addr!r} is not HOST:PORT")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"{addr!r} has port {port!r}, not a number in 1..{MAX_PORT}")
    if not 1 <= int(port) <= MAX_PORT:
        raise ValueError(f"{addr!r} has port {int(port)}, outside 1..{MAX_PORT}")
    return addr
