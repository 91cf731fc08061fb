"""Topic permissions, as RocketMQ's PermName: bits on an int."""

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_PRIORITY = 8
PERM_READ_WRITE = PERM_READ | PERM_WRITE


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_to_string(perm: int) -> str:
    return ("R" if is_readable(perm) else "-") + ("W" if is_writeable(perm) else "-") + (
        "X" if perm & PERM_INHERIT else "-")
