"""Where mqproxy forwards a broker's transaction check: to a producer of the topic connected here, one that said
so in its settings or one that sent the topic a half message without listing it; nowhere when none is."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from proto.v2 import definition_pb2, service_pb2
from proxy.processor.transaction_processor import TransactionProcessor


@dataclass
class Channel:
    client_id: str
    client_type: int = definition_pb2.PRODUCER
    user: str | None = None
    sent: list[service_pb2.TelemetryCommand] = field(default_factory=list)
    may_claim: Any = None

    def send(self, command: service_pb2.TelemetryCommand) -> None:
        self.sent.append(command)


class Channels:
    def __init__(self, listed: list[Channel], others: list[Channel]) -> None:
        self.listed = listed
        self.by_id = {c.client_id: c for c in listed + others}

    def producers_of(self, topic: str) -> list[Channel]:
        return self.listed

    def get(self, client_id: str) -> Channel | None:
        return self.by_id.get(client_id)


def check_of(topic: str) -> definition_pb2.Message:
    return definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")


def test_a_check_reaches_a_producer_that_sent_half_messages_without_listing_the_topic():
    unlisted = Channel("half-sender")
    processor = TransactionProcessor(Channels([], [unlisted, Channel("consumer", definition_pb2.SIMPLE_CONSUMER)]))
    processor._publishers["T"] = {"half-sender": None, "consumer": None}
    assert asyncio.run(processor.recover_orphaned_transaction(check_of("T"), "tx-1"))
    (command,) = unlisted.sent
    assert command.recover_orphaned_transaction_command.transaction_id == "tx-1"


def test_a_check_goes_to_one_listed_producer_and_nowhere_without_one():
    a, b = Channel("a"), Channel("b")
    processor = TransactionProcessor(Channels([a, b], []))
    assert asyncio.run(processor.recover_orphaned_transaction(check_of("T"), "tx-2"))
    assert len(a.sent) + len(b.sent) == 1
    assert not asyncio.run(TransactionProcessor(Channels([], [])).recover_orphaned_transaction(
        check_of("T"), "tx-3"))


def test_a_check_goes_only_to_a_producer_whose_user_may_still_publish_the_topic():
    """ACL on: a producer's settings were let in once, but its user may lose Pub on the topic (or its account) while
    its stream stays open; a check carries the whole message, so each is asked for again before it goes."""
    asked: list[list[str]] = []

    def may(allowed: bool) -> Any:
        async def check(settings: definition_pb2.Settings) -> definition_pb2.Status | None:
            asked.append([t.name for t in settings.publishing.topics])
            return None if allowed else definition_pb2.Status(code=definition_pb2.FORBIDDEN, message="no Pub")
        return check

    revoked, allowed = Channel("revoked", user="carol", may_claim=may(False)), Channel("ok", user="dave",
                                                                                       may_claim=may(True))
    for _ in range(5):  # whatever order the candidates are tried in
        assert asyncio.run(TransactionProcessor(Channels([revoked, allowed], [])).recover_orphaned_transaction(
            check_of("T"), "tx-4"))
    assert not revoked.sent and len(allowed.sent) == 5
    assert all(topics == ["T"] for topics in asked)
    assert not asyncio.run(TransactionProcessor(Channels([revoked], [])).recover_orphaned_transaction(
        check_of("T"), "tx-5"))
    assert not revoked.sent
