"""The Python SDK: producers, consumers, admin and the key-value client."""

from client.admin import Admin
from client.consumer.consume_result import ConsumeResult
from client.errors import MQClientError
from client.kv_client import CasResult, KVClient
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from client.results import PullResult, PullStatus, SendResult, SendStatus
from client.simple_consumer import SimpleConsumer
from client.transaction import Transaction, TransactionResolution
from common.message import Message, MessageExt
from common.message_queue import MessageQueue

__all__ = [
    "Admin",
    "CasResult",
    "ConsumeResult",
    "KVClient",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "Transaction",
    "TransactionResolution",
]
