"""The broker's gRPC face: decode, call a processor, encode. Bad input becomes INVALID_ARGUMENT."""

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from broker.request_error import RequestError
from proto import broker_pb2_grpc
from proto.broker_pb2 import LOGIC

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController

log = logging.getLogger(__name__)


async def answer(context: grpc.aio.ServicerContext, call: Callable[..., Any], *args: Any,
                 in_thread: bool = False) -> Any:
    """Run a processor call (a coroutine function is awaited); ``in_thread`` for calls that block (a
    SYNC_FLUSH put waits for its fsync)."""
    try:
        if asyncio.iscoroutinefunction(call):
            return await call(*args)
        return await asyncio.to_thread(call, *args) if in_thread else call(*args)
    except RequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except Exception:
        log.exception("request_failed call=%s", getattr(call, "__name__", call))
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the broker log")
    raise AssertionError("unreachable")


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, controller: "BrokerController") -> None:
        self.c = controller
        self.sync_flush = controller.config.flush_disk_type == "SYNC_FLUSH"

    async def SendMessage(self, request, context):
        response = await answer(context, self.c.send_processor.send, request, in_thread=self.sync_flush)
        self.c.stats.put_count += len(request.bodies)
        return response

    async def PullMessage(self, request, context):
        pull = self.c.pull_processor.pull
        logic = request.addressing == LOGIC  # may read older items on other brokers: off the event loop
        outcome = await answer(context, pull, request, in_thread=logic)
        timeout_s = min(request.suspend_timeout_ms, self.c.config.long_polling_max_suspend_ms) / 1000
        if outcome.hold is not None and timeout_s > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while outcome.hold is not None and (left := deadline - loop.time()) > 0:
                if not await self.c.hold_service.wait_for_arrival(*outcome.hold, left):
                    break
                outcome = await answer(context, pull, request, in_thread=logic)
        self.c.stats.get_count += 1
        return outcome.response

    # Logic-queue requests may call the brokers of older items: they run off the event loop.
    async def UpdateConsumerOffset(self, request, context):
        return await answer(context, self.c.consumer_manage_processor.update_offset, request,
                            in_thread=request.addressing == LOGIC)

    async def QueryConsumerOffset(self, request, context):
        return await answer(context, self.c.consumer_manage_processor.query_offset, request,
                            in_thread=request.addressing == LOGIC)

    async def GetMinOffset(self, request, context):
        return await answer(context, self.c.consumer_manage_processor.min_offset, request,
                            in_thread=request.addressing == LOGIC)

    async def GetMaxOffset(self, request, context):
        return await answer(context, self.c.consumer_manage_processor.max_offset, request,
                            in_thread=request.addressing == LOGIC)

    async def SearchOffset(self, request, context):
        return await answer(context, self.c.consumer_manage_processor.search_offset, request,
                            in_thread=request.addressing == LOGIC)

    async def QueryMessage(self, request, context):
        return await answer(context, self.c.query_processor.query_by_key, request)

    async def ViewMessageById(self, request, context):
        return await answer(context, self.c.query_processor.view_by_offset, request)

    async def UpdateAndCreateTopic(self, request, context):
        return await answer(context, self.c.admin_processor.update_topic, request)

    async def UpdateAndCreateTopicList(self, request, context):  # thousands of topics: off the event loop
        return await answer(context, self.c.admin_processor.update_topics, request, in_thread=True)

    async def DeleteTopic(self, request, context):
        return await answer(context, self.c.admin_processor.delete_topic, request)

    async def GetAllTopicConfig(self, request, context):
        return await answer(context, self.c.admin_processor.all_topic_configs)

    async def UpdateAndCreateSubscriptionGroup(self, request, context):
        return await answer(context, self.c.admin_processor.update_group, request)

    async def DeleteSubscriptionGroup(self, request, context):
        return await answer(context, self.c.admin_processor.delete_group, request)

    async def GetAllSubscriptionGroup(self, request, context):
        return await answer(context, self.c.admin_processor.all_groups)

    async def GetTopicStatsInfo(self, request, context):
        return await answer(context, self.c.admin_processor.topic_stats, request)

    async def GetConsumeStats(self, request, context):
        return await answer(context, self.c.admin_processor.consume_stats, request)

    async def GetBrokerRuntimeInfo(self, request, context):
        return await answer(context, self.c.admin_processor.runtime_info)

    async def UpdateTopicQueueMapping(self, request, context):
        return await answer(context, self.c.admin_processor.update_mapping, request)

    async def GetTopicQueueMapping(self, request, context):
        return await answer(context, self.c.admin_processor.get_mapping, request)
