"""gRPC's own log line for an answer it could not write, made one line an operator can read.

When a stream's answer cannot be sent (the client went away or cancelled, or the answer exceeds what the client
takes), grpc's core logs ``ExecuteBatchError raised in core by servicer method [...]`` at ERROR with a traceback
of its own frames, outside any handler of ours: every abandoned receive of a client printed ten lines that say
nothing to act on. It is logged as ``rpc_answer_not_sent method=...`` at WARNING, without the traceback."""

import logging
import re

CORE_LOGGER = "grpc._cython.cygrpc"
_NOT_SENT = re.compile(r"ExecuteBatchError raised in core by servicer method \[(?P<method>[^\]]*)\]")


class AnswerNotSentFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        found = _NOT_SENT.search(record.getMessage())
        if found is not None:
            record.msg = ("rpc_answer_not_sent method=%s reason='the client went away, cancelled, or takes no answer "
                          "this large'")
            record.args = (found.group("method"),)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def quiet_answers_not_sent() -> None:
    """Install the filter (once) on gRPC's core logger."""
    logger = logging.getLogger(CORE_LOGGER)
    if not any(isinstance(f, AnswerNotSentFilter) for f in logger.filters):
        logger.addFilter(AnswerNotSentFilter())
