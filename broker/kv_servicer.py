"""The broker's KV face (proto/kv.proto): decode, call the KV processor, encode."""

from typing import TYPE_CHECKING

import grpc

from broker.broker_servicer import answer
from broker.processor.kv_processor import KvRefusal
from broker.request_error import RequestError
from proto import kv_pb2_grpc

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class KvServicer(kv_pb2_grpc.KvServiceServicer):
    def __init__(self, controller: "BrokerController") -> None:
        self.kv = controller.kv_processor

    async def Write(self, request, context):
        return await answer(context, self.kv.write, request)

    async def Get(self, request, context):
        return await answer(context, self.kv.get, request)

    async def Scan(self, request, context):
        return await answer(context, self.kv.scan, request)

    async def ExportSnapshot(self, request, context):
        try:
            async for chunk in self.kv.export_snapshot(request):
                yield chunk
        except RequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except KvRefusal as refusal:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refusal))

    async def ImportSnapshot(self, request_iterator, context):
        return await answer(context, self.kv.import_snapshot, request_iterator)
