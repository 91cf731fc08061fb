"""A stream's requests answered one by one (``common/stream_answers.py``): what a handler raises becomes that
request's answer, and the stream goes on."""

import asyncio
import errno
import logging
from collections.abc import AsyncIterator

import pytest

from common import stream_answers
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


@pytest.mark.parametrize("in_order", [False, True])
def test_a_client_that_does_not_read_its_answers_is_held_back_not_buffered(monkeypatch: pytest.MonkeyPatch,
                                                                            in_order: bool):
    """While the answers are not taken (the client does not read: gRPC's write waits), the stream stops taking
    requests once it owes too many answers or too many bytes, and takes them again as answers leave."""
    monkeypatch.setattr(stream_answers, "MAX_PENDING_ANSWERS", 50)
    monkeypatch.setattr(stream_answers, "MAX_BUFFERED_BYTES", 10 * 1024)
    handled: list[int] = []

    async def big(request: kv_pb2.KvWriteRequest) -> tuple[kv_pb2.KvWriteResponse, list[bytes]]:
        handled.append(request.request_id)
        return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS), [b"x" * 1024]  # ~1 KiB an answer

    async def frames() -> AsyncIterator[kv_pb2.KvWriteFrame]:
        for f in range(100):  # 10,000 requests, 100 a frame
            yield kv_pb2.KvWriteFrame(requests=[kv_pb2.KvWriteRequest(request_id=f * 100 + i) for i in range(100)])

    async def scenario() -> None:
        stream = answer_frames(frames(), big, kv_pb2.KvWriteResponse, in_order=in_order, rpc="Write")
        await stream.__anext__()  # one frame taken; the rest wait on the client
        await asyncio.sleep(0.2)
        assert len(handled) <= 10 + stream_answers.SPAWNS_BEFORE_YIELD + 256  # the bytes bound (+ one batch)
        answered = 0
        async for encoded in stream:  # the client reads again: everything is answered
            answered += len(kv_pb2.KvWriteAnswers.FromString(encoded).responses)
        assert len(handled) == 10_000 and answered + 1 <= 10_000

    asyncio.run(scenario())
