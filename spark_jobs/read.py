"""A topic's tiered messages as a Spark DataFrame, and ``python -m spark_jobs.read --broker ADDR -t TOPIC``.

Columns: topic, queue_id, queue_offset (for a static topic the logic queue and logic offset, as consumers see
them), store_timestamp, keys, tags, properties (map), body. One Spark task per queue: it reads the queue's
consume-queue objects, then the commitlog spans they point at, straight from the tier (posix directory, or the
s3 bucket through the broker's S3 backend); every record's CRC is checked.
"""

import argparse
import struct
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from common.message_codec import decode_record
from common.statictopic.mapping_codec import detail_from_proto
from proto import broker_pb2, broker_pb2_grpc
from spark_jobs import tier_objects
from spark_jobs.broker_tier import (
    COMMIT_LOG,
    CONSUME_QUEUE,
    BrokerTier,
    S3Access,
    TierJobError,
    acl_credentials,
    add_acl_arguments,
    add_s3_arguments,
    broker_channel,
    s3_access,
)
from spark_jobs.job_output import error_of, fail, summary

CQ_UNIT = struct.Struct(">qiqq")

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("queue_id", IntegerType(), False),
    StructField("queue_offset", LongType(), False),
    StructField("store_timestamp", LongType(), False),
    StructField("keys", ArrayType(StringType()), False),
    StructField("tags", StringType(), True),
    StructField("properties", MapType(StringType(), StringType()), False),
    StructField("body", BinaryType(), False),
])

Parts = list[tuple[int, int, str]]  # (base offset, size, path) of a flat file's segments
# (root, topic, queue id, consume queue parts, commitlog parts, static topic items of the queue)
QueueTask = tuple[tier_objects.Tier, str, int, Parts, Parts, list[tuple[int, int, int, int]]]


def _stream(root: tier_objects.Tier, parts: Parts, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a flat file given as (base, size, path) parts."""
    out = []
    for base, size, path in parts:
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            out.append(tier_objects.read_range(root, path, lo - base, hi - lo))
    return b"".join(out)


def queue_rows(task: QueueTask) -> list[tuple]:
    """On an executor: every message of one queue in the tier."""
    root, topic, queue_id, cq_parts, cl_parts, logic = task
    root_path = Path(root) if isinstance(root, str) else root
    if not cq_parts:
        return []
    start, end = cq_parts[0][0], cq_parts[-1][0] + cq_parts[-1][1]
    units = list(CQ_UNIT.iter_unpack(_stream(root_path, cq_parts, start, end)))
    if not units:
        return []
    first = units[0][0]
    span = _stream(root_path, cl_parts, first, units[-1][0] + units[-1][1])
    rows = []
    for i, (position, size, _tags, _time) in enumerate(units):
        msg = decode_record(span[position - first : position - first + size], verify_crc=True)
        queue_offset = start // tier_objects.CQ_UNIT_SIZE + i
        assert msg.queue_offset == queue_offset, f"{topic}:{queue_id} unit {queue_offset} holds {msg.queue_offset}"
        out_queue, out_offset = queue_id, queue_offset
        for logic_id, item_start, item_end, logic_offset in logic:  # static topic: logic terms
            if item_start <= queue_offset and (item_end < 0 or queue_offset < item_end):
                out_queue, out_offset = logic_id, logic_offset + queue_offset - item_start
        props = msg.properties
        rows.append((topic, out_queue, out_offset, msg.store_timestamp, msg.keys, msg.tags, props, msg.body))
    return rows


def _logic_map(broker: str, topic: str, broker_name: str, credentials: tuple[str, str] | None,
               ) -> dict[int, list[tuple[int, int, int, int]]]:
    """For a static topic: physical queue id -> [(logic id, start, end, logic offset)] of this broker's items."""
    with broker_channel(broker, credentials) as channel:
        response = broker_pb2_grpc.BrokerServiceStub(channel).GetTopicQueueMapping(
            broker_pb2.TopicRequest(topic=topic), timeout=30)
    if not response.HasField("detail"):
        return {}
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for logic_id, items in detail_from_proto(response.detail).hosted_queues.items():
        for item in items:
            if item.bname == broker_name and item.logic_offset_decided():
                out.setdefault(item.queue_id, []).append((logic_id, item.start_offset, item.end_offset,
                                                          item.logic_offset))
    return out


def tiered_dataframe(spark: SparkSession, brokers: str | list[str], topic: str,
                     s3: S3Access | None = None, credentials: tuple[str, str] | None = None) -> DataFrame:
    """The topic's messages in the tiers of ``brokers`` (one address or several); ``credentials``: (access key,
    secret key) for brokers with ACL on."""
    tasks: list[QueueTask] = []
    for broker in [brokers] if isinstance(brokers, str) else brokers:
        with BrokerTier(broker, s3, credentials) as tier:
            snapshot = tier.snapshot(topic)
        if snapshot.provider is TieredBackendServiceProvider.MEMORY:
            raise TierJobError(f"broker {snapshot.broker_name} keeps its tier in {snapshot.provider}: reading "
                               "needs the posix or s3 backend")
        root: tier_objects.Tier = snapshot.location if snapshot.location.is_s3 else str(snapshot.root)
        logic = _logic_map(broker, topic, snapshot.broker_name, credentials)
        files = snapshot.by_file()
        for t, queue_id in sorted({(t, q) for t, q, _ in files}):
            cq, cl = ([(s.base_offset, s.size, s.path) for s in files.get((t, queue_id, kind), [])]
                      for kind in (CONSUME_QUEUE, COMMIT_LOG))
            tasks.append((root, t, queue_id, cq, cl, logic.get(queue_id, [])))
    sc = spark.sparkContext
    rdd = sc.parallelize(tasks, max(1, len(tasks))).flatMap(queue_rows)
    return spark.createDataFrame(rdd, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    # Executors get functions by reference to this module; run as ``python -m`` it is ``__main__``, whose
    # functions Spark would pickle by value: call through the imported module instead.
    from spark_jobs import read as job

    parser = argparse.ArgumentParser(prog="spark_jobs.read", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True, action="append", help="broker address (repeat for several)")
    parser.add_argument("-t", "--topic", required=True)
    parser.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's wins)")
    parser.add_argument("--show", type=int, default=20, help="rows to print")
    parser.add_argument("--output", default=None, help="also write the DataFrame as Parquet here")
    add_s3_arguments(parser)
    add_acl_arguments(parser)
    args = parser.parse_args(argv)
    from spark_jobs.session import spark_session

    try:
        spark = spark_session("tiered-read", args.master)
        df = job.tiered_dataframe(spark, args.broker, args.topic, s3_access(args), acl_credentials(args))
        if args.output:
            df.write.mode("overwrite").parquet(args.output)
        count = df.count()
        df.orderBy("queue_id", "queue_offset").show(args.show, truncate=60)
    except TierJobError as exc:
        return fail("read", str(exc))
    except Exception as exc:  # Spark or the backend: still one line, not a traceback
        return fail("read", error_of(exc))
    summary("read", {"topic": args.topic, "messages": count})
    return 0


if __name__ == "__main__":
    sys.exit(main())
