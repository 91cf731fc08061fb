"""Reput: reads the commitlog from the lowest dispatcher checkpoint and feeds the dispatch chain. What this
process appended comes with dispatch hints (``dispatch_hints.py``): the requests are taken as the appender made
them instead of being parsed back out of the segment.

A failure while parsing or dispatching (a broken invariant: a record that is not where it should be, a
dispatcher that cannot apply) fail-stops the store instead of being retried forever: writes that nobody could
dispatch would otherwise keep being acknowledged. A restart recovers and replays from the checkpoints."""

import logging
import mmap
import threading
import time
from collections.abc import Callable

from broker.store.commit_log import CommitLog
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.damaged_range import NoRecordHere, log_skipped, next_record
from broker.store.dispatch.dispatch_hints import DispatchHints
from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, TOPIC, DispatchRequest
from broker.store.dispatch.topic_deletion import TOPIC_DELETION_TOPIC, deleted_topic
from broker.store.fault_points import check_dispatch
from broker.store.mapped_file import MappedFile
from broker.store.running_flags import RunningFlags
from common.message_codec import BLANK_MAGIC, DISPATCH_FIELDS, HEADER_SIZE, MESSAGE_MAGIC, SIZE_MAGIC
from common.message_properties import properties_tags_code
from common.storage_refusal import is_storage_failure

log = logging.getLogger(__name__)

MAX_BATCH_RECORDS = 4096
# A larger backlog is left to the reput thread (``dispatch_on``): a producer's batches at full speed, whose passes
# there gather several appends and run beside the loop's next ones (dispatched on the loop, 64 x 1 KiB batches
# were produced ~10% slower), or a catch-up, which must not hold up the loop.
INLINE_MAX_BYTES = 32 * 1024
ArrivalListener = Callable[[list[DispatchRequest]], None]
CallSoon = Callable[[Callable[[], None]], object]


def parse_records(
    mm: mmap.mmap, pos: int, limit: int, base: int, topics: dict[bytes, str], max_count: int = MAX_BATCH_RECORDS
) -> tuple[list[DispatchRequest], int, bool]:
    """Parse up to ``max_count`` whole records in ``mm[pos:limit]`` (``base`` = commitlog offset of
    ``mm[0]``; ``limit`` is a record boundary). Returns the requests, the position after the last one,
    and whether an end-of-segment marker was hit.

    Records come in runs (a producer's batch: one topic, often the same properties): a record whose topic or
    properties equal the previous one's reuses its decoded topic, its properties object and its tags code, so
    the common case costs a compare instead of a decode, a search and a CRC (and dispatchers can recognise
    repeated properties by identity). A topic deletion record comes alone (``topic_deletion.py``): the requests
    end before it, or are it."""
    out: list[DispatchRequest] = []
    append = out.append
    unpack = DISPATCH_FIELDS.unpack_from
    find = mm.find
    raw_topic, topic = b"", ""
    props_seen: bytes | None = None
    tags_code = 0
    while pos < limit and len(out) < max_count:
        if limit - pos < HEADER_SIZE:  # too short for a record: an end-of-segment marker, or a header not all readable
            magic = SIZE_MAGIC.unpack_from(mm, pos)[1]
            if magic == BLANK_MAGIC:
                return out, pos, True
            if magic == MESSAGE_MAGIC and limit < len(mm):  # (not confirmed to its end yet)
                return out, pos, False
            raise NoRecordHere(base + pos, out, pos)
        size, magic, queue_id, queue_offset, physical, store_ts, topic_len, props_len = unpack(mm, pos)
        if magic == BLANK_MAGIC:
            return out, pos, True
        if magic != MESSAGE_MAGIC or physical != base + pos or size < HEADER_SIZE:
            raise NoRecordHere(base + pos, out, pos)
        if pos + size > limit:  # its end is not readable yet (not confirmed, or not copied from the master)
            return out, pos, False
        t0 = pos + HEADER_SIZE
        t1 = t0 + topic_len
        if topic_len != len(raw_topic) or find(raw_topic, t0, t1) != t0:  # another topic than the last record's
            raw_topic = mm[t0:t1]
            topic = topics.get(raw_topic) or topics.setdefault(raw_topic, raw_topic.decode())
            if topic == TOPIC_DELETION_TOPIC:  # dispatched alone: where it stands in the log is what it means
                if not out:
                    append((topic, queue_id, queue_offset, physical, size, 0, store_ts, mm[t1 : t1 + props_len]))
                    pos += size
                return out, pos, False
        props = mm[t1 : t1 + props_len]
        if props == props_seen:
            props = props_seen
        else:
            props_seen = props
            tags_code = properties_tags_code(props)
        append((topic, queue_id, queue_offset, physical, size, tags_code, store_ts, props))
        pos += size
    return out, pos, False


class ReputMessageService(threading.Thread):
    def __init__(self, commit_log: CommitLog, dispatchers: list[CommitLogDispatcher],
                 running_flags: RunningFlags) -> None:
        super().__init__(name="reput", daemon=True)
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.running_flags = running_flags
        self.failed = False
        self.reput_from_offset = 0
        # Set by recovery to the recovered end for its replay: damage below it is skipped, not failed on
        # (``damaged_range.py``); the ranges skipped are kept for the start's log line.
        self.damage_skipped_below = 0
        self.recovered_end = 0  # the log's end as recovery found it (set with the above)
        self.skipped_damage: list[tuple[int, int]] = []
        self.arrival_listeners: list[ArrivalListener] = []
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._progress = threading.Condition()
        self._pass_lock = threading.Lock()
        self._topics: dict[bytes, str] = {}
        self.hints = DispatchHints()
        self._inline: tuple[int, CallSoon] | None = None
        self._inline_scheduled = False
        commit_log.add_confirm_listener(self._on_confirmed)
        commit_log.observe_appends(self.hints)

    def dispatch_on(self, thread_id: int, call_soon: CallSoon) -> None:
        """What is confirmed on ``thread_id`` (the broker's event loop, where ASYNC_FLUSH appends) is dispatched on
        that thread, by ``call_soon`` once the current step is done, instead of by a wake-up of the reput thread: a
        parked pull is answered without two thread hand-offs (0.3-0.5 ms of a send-to-receive on a busy machine), and
        the appends of one loop turn are dispatched in one pass."""
        self._inline = (thread_id, call_soon)

    def _on_confirmed(self, _offset: int) -> None:
        inline = self._inline
        if inline is not None and threading.get_ident() == inline[0]:
            if not self._inline_scheduled:  # called under the commitlog's lock: dispatch after it, not here
                self._inline_scheduled = True
                inline[1](self._dispatch_inline)
            return
        if not self._wakeup.is_set():  # Event.set takes a lock and notifies even when already set
            self._wakeup.set()

    def _dispatch_inline(self) -> None:
        self._inline_scheduled = False
        backlog = self.commit_log.confirm_offset - self.reput_from_offset
        if backlog <= 0:
            return
        # A pass running in the reput thread may have looked at the confirm offset already: wake it for another.
        if backlog > INLINE_MAX_BYTES or not self._pass_lock.acquire(blocking=False):
            self._wakeup.set()
            return
        try:
            self._pass(inline=True)
        except Exception:
            pass  # fail-stopped and logged by the pass; the appends stand, the store takes no more
        finally:
            self._pass_lock.release()

    def start_from(self, offset: int) -> None:
        self.reput_from_offset = max(offset, self.commit_log.min_offset())

    def do_reput(self) -> int:
        """Dispatch everything up to the confirm offset; returns how many records were dispatched. One pass at
        a time: shutdown runs a last pass from its own thread while the reput thread may still be in one."""
        with self._pass_lock:
            return self._pass()

    def _pass(self, inline: bool = False) -> int:
        """One pass, under the pass lock: a failure fail-stops the store, and is raised. ``inline`` (on the
        appending thread, the event loop): a topic deletion record is left to the reput thread, woken for it, since
        dropping a topic's queues deletes files and ranges for as long as the topic is big."""
        if self.failed:
            return 0
        try:
            return self._do_reput(inline)
        except Exception as exc:
            self._fail(exc)
            raise

    def _do_reput(self, inline: bool = False) -> int:
        count = 0
        mfq = self.commit_log.mapped_file_queue
        while self.reput_from_offset < self.commit_log.confirm_offset and not self._stopped.is_set():
            offset = self.reput_from_offset
            hinted = self.hints.take(offset, self.commit_log.confirm_offset, MAX_BATCH_RECORDS)
            if hinted is not None:
                self._dispatch(*hinted)
                count += len(hinted[0])
                continue
            segment = mfq.find(offset)
            if segment is None:  # expired under us: continue at the oldest segment still here
                first = mfq.min_offset()
                if first <= offset:
                    break
                log.warning("reput_skipped_expired from=%d to=%d", offset, first)
                self.reput_from_offset = first
                continue
            base = segment.file_from_offset
            limit = min(self.commit_log.confirm_offset, segment.end_offset) - base
            try:
                requests, pos, hit_end = parse_records(segment.mm, offset - base, limit, base, self._topics)
            except NoRecordHere as exc:
                if exc.offset >= self.damage_skipped_below:  # not a replay at start: a broken invariant
                    raise
                requests, pos, hit_end = exc.requests, exc.pos, False
                if not requests:  # at the damage itself: on to the next intact record
                    self._skip_damage(segment, exc.pos)
                    continue
            if inline and requests and requests[0][TOPIC] == TOPIC_DELETION_TOPIC:
                self._wakeup.set()
                break
            end = segment.end_offset if hit_end else base + pos
            if not requests and end == offset:  # a record whose end is not readable yet: wait for it
                if self._size_damaged(segment, offset):
                    self._skip_damage(segment, offset - base)
                    continue
                break
            self._dispatch(requests, end)
            count += len(requests)
        return count

    def _size_damaged(self, segment: MappedFile, offset: int) -> bool:
        """At start, whether the record at ``offset`` says a size that reaches past the segment or the recovered log
        (its size field is damaged). One that ends past the confirm offset only waits to be confirmed."""
        if offset >= self.damage_skipped_below:
            return False
        size = SIZE_MAGIC.unpack_from(segment.mm, offset - segment.file_from_offset)[0]
        return size < HEADER_SIZE or offset + size > min(segment.end_offset, self.recovered_end)

    def _skip_damage(self, segment: MappedFile, pos: int) -> None:
        """The replay at start met damage at ``pos`` of ``segment``: on from the next intact record in what recovery
        found of the segment (one past the confirm offset too, which then waits to be confirmed), or from its end."""
        base = segment.file_from_offset
        end_here = min(segment.end_offset, self.recovered_end)
        after = next_record(segment.mm, pos, end_here - base, base)
        end = base + after if after is not None else end_here
        log_skipped(base + pos, end, segment.path.name)
        with self._progress:
            self.reput_from_offset = end
        self.skipped_damage.append((base + pos, end))

    def _fail(self, exc: Exception) -> None:
        # Fail-stop first: a writer woken by the notify must find the reason set.
        self.running_flags.fail_stop(f"dispatch failed at commitlog offset {self.reput_from_offset}: {exc!r}",
                                     exc_info=None if is_storage_failure(exc) else exc)  # the disk's: one line
        with self._progress:
            self.failed = True
            self._progress.notify_all()
        self.hints.forget()  # nothing more is dispatched: they would only hold memory

    def _dispatch(self, requests: list[DispatchRequest], end: int) -> None:
        check_dispatch(self.reput_from_offset)
        if requests and requests[0][TOPIC] == TOPIC_DELETION_TOPIC:  # alone in its batch (parse_records)
            topic = deleted_topic(requests[0])
            for dispatcher in self.dispatchers:
                dispatcher.topic_deleted(topic, requests[0][PHYSICAL_OFFSET])
            log.info("topic_deletion_dispatched topic=%s commitlog_offset=%d", topic, requests[0][PHYSICAL_OFFSET])
            requests = []
        for dispatcher in self.dispatchers:
            dispatcher.dispatch(requests, end)
        with self._progress:
            self.reput_from_offset = end
            self._progress.notify_all()
        if requests:
            for listener in self.arrival_listeners:
                listener(requests)

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until every record below ``offset`` was dispatched; False on timeout or failure."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while self.reput_from_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0 or self.failed:
                    return False
                self._progress.wait(left)
        return True

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(0.05)
            self._wakeup.clear()
            try:
                self.do_reput()
            except Exception:
                return  # fail-stopped (logged once); nothing more is dispatched until a restart

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self.is_alive():
            self.join(timeout=10)
