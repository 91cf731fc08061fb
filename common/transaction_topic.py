"""Transactional messages' system topics, group, properties and flags (upstream's names, so tools that know
RocketMQ find them).

A half message waits in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (its real topic and queue in ``REAL_TOPIC`` and
``REAL_QID``), where no consumer reads it; every end and check of one is an op message in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0; a half message checked ``transactionCheckMax`` times without an answer is
moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` (readable by a pull consumer, for an operator to look at). The broker's
progress through the half and op queues is kept as the consumer offsets of ``CID_RMQ_SYS_TRANS``. Producers cannot
send to these topics (``common/topic_validator.py``).
"""

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPICS = (HALF_TOPIC, OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)
HALF_QUEUE_ID = 0
OP_QUEUE_ID = 0
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # upstream's MixAll.CID_SYS_RMQ_TRANS

# Set by the producer on a half message: "true", and the producer group whose members are asked about it.
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
# Set by the broker: on a check's message, its transaction id; on a discarded one, how often it was checked.
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"

# A record's sys_flag bits 2..3 (upstream's MessageSysFlag): a half message is PREPARED, its committed copy COMMIT.
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
TRANSACTION_TYPE_MASK = 0x3 << 2


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def with_transaction_type(sys_flag: int, kind: int) -> int:
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | kind
