"""A stream's requests answered one by one (``common/stream_answers.py``): what a handler raises becomes that
request's answer, and the stream goes on."""

import asyncio
import errno
import logging
from collections.abc import AsyncIterator

import pytest

from common.request_error import RequestError
from common.response_code import ResponseCode
from common.stream_answers import answer_frames
from proto import kv_pb2

ERRORS: dict[bytes, Exception] = {
    b"full": OSError(errno.ENOSPC, "No space left on device"),
    b"bad": RequestError("key is bad"),
    b"bug": ZeroDivisionError("division by zero"),
}


async def _handle(request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
    if request.key in ERRORS:
        raise ERRORS[request.key]
    return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=True)


async def _answers(keys: list[bytes]) -> dict[int, kv_pb2.KvWriteResponse]:
    async def frames() -> AsyncIterator[kv_pb2.KvWriteFrame]:
        yield kv_pb2.KvWriteFrame(requests=[kv_pb2.KvWriteRequest(request_id=i, key=k) for i, k in enumerate(keys)])

    answers: dict[int, kv_pb2.KvWriteResponse] = {}
    async for encoded in answer_frames(frames(), _handle, kv_pb2.KvWriteResponse, in_order=True, rpc="Write"):
        for response in kv_pb2.KvWriteAnswers.FromString(encoded).responses:
            answers[response.request_id] = response
    return answers


def test_each_failure_is_its_requests_answer_and_a_full_disk_is_a_refusal_without_traceback(
        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.ERROR, logger="common.stream_answers")
    answers = asyncio.run(_answers([b"ok", b"full", b"bad", b"bug", b"ok-again"]))
    assert [answers[i].code for i in range(5)] == [
        ResponseCode.SUCCESS, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.INVALID_PARAMETER,
        ResponseCode.SYSTEM_ERROR, ResponseCode.SUCCESS]
    assert answers[1].remark == "disk full: [Errno 28] No space left on device"
    full, bug = caplog.records
    assert full.getMessage().startswith("rpc_refused_disk_full rpc=Write request_id=1") and full.exc_info is None
    assert bug.getMessage().startswith("rpc_failed rpc=Write request_id=3") and bug.exc_info is not None
