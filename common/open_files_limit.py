"""A daemon's open-files limit, raised to the hard limit at its start (as Go's runtime does, and upstream's start
scripts ask for with ``ulimit -n 655350``).

The file store keeps two descriptors for each consume-queue file a queue wrote to (its writer and its mapping's),
and one for each open commitlog segment; a proxy or name server one per client connection. Under the 1,024 a login
shell or a systemd service without ``LimitNOFILE`` gives, a broker stopped taking writes after about 500 used
queues, and its restart failed the same way."""

import logging
import resource

log = logging.getLogger(__name__)

LOW_OPEN_FILES = 10_000  # below it the operator is told at start (a file-store broker: under 5,000 used queues)
UNLIMITED_TARGET = 1 << 20  # where the hard limit is "unlimited": the kernel's usual nr_open


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one; returns the limit in force (warned about when low). Called once
    the daemon's configuration was found good (a bad one is one line on stderr)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a platform capping it lower (macOS's OPEN_MAX): keep what is
            log.info("open_files_limit_not_raised soft=%d hard=%d error=%r", soft, hard, str(exc))
    if soft != resource.RLIM_INFINITY and soft < LOW_OPEN_FILES:
        log.warning("open_files_limit_low limit=%d hint='raise the hard limit (ulimit -Hn, systemd LimitNOFILE, docker "
                    "--ulimit nofile): a file-store broker holds 2 files per queue that took a message'", soft)
    return soft
