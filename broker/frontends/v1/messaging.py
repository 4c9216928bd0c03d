"""MessagingService: the gRPC servicer. Each method is a thin shell (timing + error mapping in
``rpc``) around the processor that does the work."""

from __future__ import annotations

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.grpc.handlers import MalformedRequest
from wharf.broker.frontends.grpc.rpc import born_host_of, rpc, status_for
from wharf.broker.frontends.v1.consumer import ConsumerProcessor
from wharf.broker.frontends.v1.pull import PullProcessor
from wharf.broker.frontends.v1.pull_stream import PullStreamProcessor
from wharf.broker.frontends.v1.query import QueryProcessor
from wharf.broker.frontends.v1.send import SendProcessor
from wharf.broker.frontends.v1.transactions import TransactionProcessor
from wharf.v1 import messaging_pb2_grpc


class MessagingService(messaging_pb2_grpc.MessagingServiceServicer):
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx
        self.sender = SendProcessor(ctx)
        self.puller = PullProcessor(ctx)
        self.pull_streams = PullStreamProcessor(ctx, self.puller)
        self.queries = QueryProcessor(ctx)
        self.consumers = ConsumerProcessor(ctx)
        self.transactions = TransactionProcessor(ctx)

    @rpc("SendMessage")
    async def SendMessage(self, request, context):  # type: ignore[no-untyped-def]
        return await self.sender.send(request, born_host_of(context.peer()))

    async def SendMessageStream(self, request_iterator, context):  # type: ignore[no-untyped-def]
        # Errors are reported per request inside the replies (each request is observed as one
        # RPC for metrics); only a broken stream ends the call.
        async for reply in self.sender.stream(request_iterator, born_host_of(context.peer())):
            yield reply

    @rpc("PullMessage")
    async def PullMessage(self, request, context):  # type: ignore[no-untyped-def]
        return await self.puller.pull(request, self.ctx.replies.for_call(context))

    async def PullMessageStream(self, request_iterator, context):  # type: ignore[no-untyped-def]
        # As SendMessageStream: errors per pull in its reply; only a broken stream ends it.
        # The wire port's context can write a reply from a pull's task (WireContext.write_now)
        # and have one written once the log is durable (write_durable); grpc.aio's has no such
        # methods: None.
        write_now = getattr(context, "write_now", None)
        write_durable = getattr(context, "write_durable", None)
        async for reply in self.pull_streams.serve(
            request_iterator, context.peer(), write_now, write_durable
        ):
            yield reply

    @rpc("QueryMessage")
    async def QueryMessage(self, request, context):  # type: ignore[no-untyped-def]
        return self.queries.query_message(request)

    @rpc("ViewMessage")
    async def ViewMessage(self, request, context):  # type: ignore[no-untyped-def]
        return self.queries.view_message(request)

    @rpc("SearchOffset")
    async def SearchOffset(self, request, context):  # type: ignore[no-untyped-def]
        return self.queries.search_offset(request)

    @rpc("GetQueueOffsets")
    async def GetQueueOffsets(self, request, context):  # type: ignore[no-untyped-def]
        return self.queries.get_queue_offsets(request)

    @rpc("QueryRoute")
    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        return self.queries.query_route(request)

    @rpc("Heartbeat")
    async def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]
        return self.consumers.heartbeat(request)

    @rpc("UnregisterClient")
    async def UnregisterClient(self, request, context):  # type: ignore[no-untyped-def]
        return self.consumers.unregister(request)

    @rpc("GetConsumerList")
    async def GetConsumerList(self, request, context):  # type: ignore[no-untyped-def]
        return self.consumers.consumer_list(request)

    @rpc("UpdateConsumerOffset")
    async def UpdateConsumerOffset(self, request, context):  # type: ignore[no-untyped-def]
        return await self.consumers.update_offset(request)

    @rpc("QueryConsumerOffset")
    async def QueryConsumerOffset(self, request, context):  # type: ignore[no-untyped-def]
        return self.consumers.query_offset(request)

    @rpc("SendMessageBack")
    async def SendMessageBack(self, request, context):  # type: ignore[no-untyped-def]
        return await self.consumers.send_back(request)

    @rpc("EndTransaction")
    async def EndTransaction(self, request, context):  # type: ignore[no-untyped-def]
        return await self.transactions.end(request)

    @rpc("EndTransactions")
    async def EndTransactions(self, request, context):  # type: ignore[no-untyped-def]
        return await self.transactions.end_batch(request)

    async def TransactionChecks(self, request, context):  # type: ignore[no-untyped-def]
        """Server-streaming until the producer goes away; a bad request is one abort."""
        try:
            if type(request) is MalformedRequest:
                raise InvalidArgumentError(request.message)
            async for check in self.transactions.checks(request):
                yield check
        except (InvalidArgumentError, NotFoundError) as exc:
            code, message = status_for(exc)
            await context.abort(code, message)

    @rpc("RecallMessage")
    async def RecallMessage(self, request, context):  # type: ignore[no-untyped-def]
        return await self.transactions.recall(request)
