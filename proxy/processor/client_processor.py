"""Heartbeat, NotifyClientTermination and the Telemetry commands (upstream's ClientActivity).

A client reports its settings on its Telemetry stream; the proxy answers with the settings the server decides,
which the clients cannot do without: a producer's ``publishing.max_body_size`` (without it every send fails
client-side, "max size=0 bytes") and its send retry policy; a consumer's FIFO flag and retry policy (from its
group's config on the brokers), receive batch size and long polling timeout. Membership needs nothing on the
brokers: POP keeps a group's progress whoever pops, so heartbeats are only answered."""

import logging
from collections.abc import Awaitable, Callable

from google.protobuf.duration_pb2 import Duration

from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from proto.v2 import definition_pb2, service_pb2
from proxy.group_settings import GroupSettingsService
from proxy.message_convert import duration
from proxy.proxy_acl import check_settings
from proxy.proxy_config import ProxyConfig
from proxy.telemetry_channels import TelemetryChannel
from proxy.v2_codes import Code, ProxyError, ok_status

log = logging.getLogger(__name__)

ClientType = definition_pb2.ClientType
OnPublishing = Callable[[str, list[str]], Awaitable[None]]  # client id, the topics it publishes
CONSUMER_TYPES = (ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER, ClientType.PULL_CONSUMER)
PRODUCER_MAX_ATTEMPTS = 3  # a send tried three times in all, as upstream's proxy tells producers
PRODUCER_BACKOFF = definition_pb2.ExponentialBackoff(initial=Duration(nanos=10_000_000), max=Duration(seconds=1),
                                                     multiplier=2.0)
# A consumer's nack waits the next of these (the delay levels, as upstream's proxy tells consumers).
CONSUMER_BACKOFF = definition_pb2.CustomizedBackoff(
    next=[duration(ms) for ms in parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)])


class ClientProcessor:
    def __init__(self, groups: GroupSettingsService, config: ProxyConfig,
                 on_client_gone: Callable[[str], None] = lambda client_id: None,
                 on_publishing: OnPublishing | None = None) -> None:
        self.groups = groups
        self.config = config
        self.on_client_gone = on_client_gone  # what the proxy keeps for a client it lets go (auto-renewed messages)
        self.on_publishing = on_publishing  # a producer's topics (the transaction checks of their groups)

    async def heartbeat(self, request: service_pb2.HeartbeatRequest) -> service_pb2.HeartbeatResponse:
        if request.client_type not in ClientType.values():
            raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {request.client_type} is unknown")
        return service_pb2.HeartbeatResponse(status=ok_status())

    async def notify_client_termination(self, request: service_pb2.NotifyClientTerminationRequest,
                                        client_id: str) -> service_pb2.NotifyClientTerminationResponse:
        log.info("client_terminated client_id=%s group=%s", client_id, request.group.name)
        self.on_client_gone(client_id)
        return service_pb2.NotifyClientTerminationResponse(status=ok_status())

    async def on_telemetry_command(self, channel: TelemetryChannel, command: service_pb2.TelemetryCommand
                                   ) -> service_pb2.TelemetryCommand | None:
        """The answer to one command a client sent on its stream (None: nothing to answer)."""
        kind = command.WhichOneof("command")
        if kind == "settings":
            return await self._settings(channel, command.settings)
        if kind in ("thread_stack_trace", "verify_message_result"):  # answers to commands the proxy never sends
            return None
        raise ProxyError(Code.BAD_REQUEST, f"telemetry command {kind or 'without a command'} is not one a client "
                                           "sends")

    async def _settings(self, channel: TelemetryChannel, reported: definition_pb2.Settings
                        ) -> service_pb2.TelemetryCommand:
        await check_settings(reported)  # ACL on: may the caller publish or consume what these settings name?
        settings = definition_pb2.Settings()
        settings.CopyFrom(reported)
        client_type = reported.client_type
        if client_type == ClientType.PRODUCER:
            settings.backoff_policy.CopyFrom(definition_pb2.RetryPolicy(max_attempts=PRODUCER_MAX_ATTEMPTS,
                                                                        exponential_backoff=PRODUCER_BACKOFF))
            settings.publishing.max_body_size = self.config.max_body_size
            settings.publishing.validate_message_type = True
        elif client_type in CONSUMER_TYPES:
            group = reported.subscription.group.name
            if not group:
                raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's settings name no consumer group")
            group_settings = await self.groups.get(group)
            settings.backoff_policy.CopyFrom(definition_pb2.RetryPolicy(
                max_attempts=group_settings.retry_max_times + 1, customized_backoff=CONSUMER_BACKOFF))
            settings.subscription.fifo = group_settings.fifo
            settings.subscription.receive_batch_size = self.config.max_receive_batch
            settings.subscription.long_polling_timeout.CopyFrom(duration(self.config.max_long_polling_ms))
        else:
            raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {client_type} is not served")
        channel.settings = settings  # first: a check due at once finds this producer among the topic's
        log.info("client_settings client_id=%s client_type=%s", channel.client_id, ClientType.Name(client_type))
        if client_type == ClientType.PRODUCER and self.on_publishing is not None:
            try:
                await self.on_publishing(channel.client_id, [topic.name for topic in reported.publishing.topics])
            except Exception:  # the settings hold all the same; the next settings or half message tries again
                log.exception("transaction_checks_not_kept client_id=%s", channel.client_id)
        return service_pb2.TelemetryCommand(status=ok_status(), settings=settings)
