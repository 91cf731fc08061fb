"""Which KV answers the client retries (after a fresh route): those where nothing was applied and another broker
may take the write. A deposed master's "another replica is master now" was raised to users while the new master
served (the failover review: 41 KV writes failed in one SIGSTOP of a master)."""

from client.kv_client import retryable_answer
from common.refusal import DEPOSED_MASTER, LEASE_LOST, NOT_GROUP_MASTER
from common.response_code import ResponseCode
from proto import kv_pb2


def answer(code: int, remark: str) -> kv_pb2.KvWriteResponse:
    return kv_pb2.KvWriteResponse(code=code, remark=remark)


def test_a_deposed_master_or_a_slave_refusing_is_retried_and_other_refusals_are_not() -> None:
    assert retryable_answer(answer(ResponseCode.SERVICE_NOT_AVAILABLE,
                                   f"the commitlog refused the write: {DEPOSED_MASTER}: restarting as its replica"))
    assert retryable_answer(answer(ResponseCode.SERVICE_NOT_AVAILABLE, f"broker broker-a {NOT_GROUP_MASTER}"))
    assert retryable_answer(answer(ResponseCode.NO_PERMISSION, "broker-a is a slave: writes go to its master"))
    assert not retryable_answer(answer(ResponseCode.SERVICE_NOT_AVAILABLE, "the disk is full"))
    assert not retryable_answer(answer(ResponseCode.NO_PERMISSION, "access denied"))


def test_a_lease_lost_refusal_is_retried() -> None:
    """A master that lost its controller lease refuses writes (nothing stored): retried as a deposed one's (the
    refusal said "lost its lease", which no client took for a failover)."""
    assert retryable_answer(answer(ResponseCode.SERVICE_NOT_AVAILABLE, f"master 127.0.0.1:1 {LEASE_LOST}: ..."))
