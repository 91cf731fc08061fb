"""gRPC core's log line for a stream answer it could not write (the client went away, or takes no answer that
large): ten lines of gRPC's own traceback at ERROR at every abandoned receive; one WARNING line naming the method
now. Other lines of that logger pass as they are."""

import logging
import sys

import pytest

from common.grpc_core_log import CORE_LOGGER, quiet_answers_not_sent


def test_an_answer_not_sent_is_one_warning_line_naming_the_method(caplog: pytest.LogCaptureFixture):
    quiet_answers_not_sent()
    quiet_answers_not_sent()  # (once)
    core = logging.getLogger(CORE_LOGGER)
    try:
        raise RuntimeError('Failed "execute_batch"')
    except RuntimeError:
        exc_info = sys.exc_info()
    with caplog.at_level(logging.INFO, logger=CORE_LOGGER):
        core.error("ExecuteBatchError raised in core by servicer method [%s]",
                   "/apache.rocketmq.v2.MessagingService/ReceiveMessage", exc_info=exc_info)
        core.error("Unexpected [ValueError] raised by servicer method [/x/Y]")
    first, other = caplog.records
    assert (first.levelname, first.getMessage(), first.exc_info) == (
        "WARNING", "rpc_answer_not_sent method=/apache.rocketmq.v2.MessagingService/ReceiveMessage reason='the "
        "client went away, cancelled, or takes no answer this large'", None)
    assert "Traceback" not in caplog.text
    assert (other.levelname, other.getMessage()) == (
        "ERROR", "Unexpected [ValueError] raised by servicer method [/x/Y]")
    assert len(core.filters) == 1
