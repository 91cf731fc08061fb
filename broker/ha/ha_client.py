"""The slave's side of replication: one stream to the master's haListenPort; the master's commitlog bytes are
appended at the same offsets, and a flusher thread acknowledges what is durable: it fsyncs whatever arrived while
the previous fsync ran (a group commit), so receiving never waits for the disk. The slave's confirm offset follows
the master's (it never shows what the master has not confirmed). A broken stream is reopened after a pause, from
where the commitlog ends. An empty replica of a master whose older segments expired first copies the master's
state (``broker/ha/state_copy.py``), then starts its log where the welcome says (the master's oldest segment).

Controller mode (``epochs`` given): the handshake names this replica's newest epoch and the master epoch the
controller announced; the master's welcome says where this log stops agreeing with the master's, and the tail
past it is cut before anything is appended (only a tail that was never dispatched: otherwise replication stops
and says why). Each epoch's start is recorded in the epoch file before its first bytes are appended."""

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from broker.ha.epoch_file import EpochEntry, EpochFile
from broker.ha.ha_service import HEARTBEAT_S, GroupIdentity
from broker.ha.state_copy import CopiedStore, receive_state
from broker.store.commit_log import CommitLog
from broker.store.fault_points import check_fsync
from common import tls
from common.acl import inner_metadata
from common.storage_refusal import is_disk_full
from proto import ha_pb2, ha_pb2_grpc

log = logging.getLogger(__name__)

REOPEN_PAUSE_S = 1.0
SILENCE_S = 3 * HEARTBEAT_S  # a stream that heard nothing from its master this long is on a dead connection
DISK_FULL_RETRY_S = 5.0  # a replica whose disk refused its master's bytes asks again this often
# A state copy's chunk may be one record larger than its 4 MiB (a timer's holds a whole message, and maxMessageSize
# goes up to 1 GiB): at 64 MiB a replica of such a master asked for the copy again and again, for good.
MAX_FRAME_BYTES = (1 << 31) - 1
_CLOSE = -1


class HAClient(threading.Thread):
    def __init__(self, master_ha_addr: str, identity: GroupIdentity, commit_log: CommitLog,
                 epochs: EpochFile | None = None, master_epoch: int = 0,
                 truncate: Callable[[int], None] | None = None,
                 start_at: Callable[[int, int | None], None] | None = None,
                 copied_stores: dict[str, CopiedStore] | None = None,
                 fail_stop: Callable[[str], None] = lambda _reason: None) -> None:
        super().__init__(name="ha-client", daemon=True)
        self.master_ha_addr = master_ha_addr
        self.epochs = epochs
        self.master_epoch = master_epoch
        self.truncate = truncate  # MessageStore.truncate_diverged_tail
        self.start_at = start_at  # MessageStore.start_replica_at(offset, segment_size)
        self.copied_stores = copied_stores or {}  # what an empty replica copies besides the log (state_copy.py)
        self.fail_stop = fail_stop  # RunningFlags.fail_stop: a failed fsync (what was written may be lost)
        self.refusal = ""  # why this replica stopped following (a tail it must not cut), or paused (a full disk)
        self.streaming = False  # a stream from the master is open and welcomed (False: not yet, or it broke)
        self.identity = identity
        self.commit_log = commit_log
        self.master_addr = ""  # the master's broker address, from its welcome
        self._channel = self._new_channel()
        self._last_frame = time.monotonic()  # when the current stream last heard from the master
        self._copying = False  # a state copy is under way (its own call: the stream is quiet meanwhile)
        self._stopped = threading.Event()
        self._metadata_copied = threading.Event()  # the slave's copy of this master's metadata is taken
        self._acks: queue.Queue[int] = queue.Queue()  # the current stream's acks (replaced per stream)
        # Held by the flusher from its fsync to its ack, and while a stream's welcome is applied: an ack measured
        # before a cut never reaches the stream that follows it.
        self._ack_lock = threading.Lock()
        self._call: grpc.Future | None = None
        self._written = threading.Condition()
        self._flusher = threading.Thread(target=self._flush_loop, name="ha-flusher", daemon=True)

    def _new_channel(self) -> grpc.Channel:
        # Subchannels of its own: a channel made to replace a dead connection must not be handed that connection
        # again from gRPC's process-wide pool.
        return tls.channel(self.master_ha_addr, options=[("grpc.max_receive_message_length", MAX_FRAME_BYTES),
                                                         ("grpc.use_local_subchannel_pool", 1)])

    def _watch_silence(self) -> None:
        """The master sends a frame at least every HEARTBEAT_S: a stream silent for SILENCE_S is on a connection
        that died without a word (a NAT or firewall dropped it, the master's host vanished). Its channel is replaced,
        which ends the stream, and the next one dials afresh; kept, it waited for good, and a SYNC_MASTER refused
        every send (no slave) all that time."""
        silent = time.monotonic() - self._last_frame
        if self._call is None or self._copying or self._stopped.is_set() or silent < SILENCE_S:
            return
        log.warning("replication_silent master=%s silent_s=%.0f action=reconnect", self.master_ha_addr, silent)
        self._last_frame = time.monotonic()
        old, self._channel = self._channel, self._new_channel()
        old.close()  # ends the stream (CANCELLED): the follow loop opens the next one on the new channel

    def run(self) -> None:
        self._flusher.start()
        while not self._stopped.is_set():
            try:
                self._follow()
            except grpc.RpcError as exc:
                if self._stopped.is_set():
                    return
                log.warning("replication_broken master=%s status=%s detail=%s", self.master_ha_addr,
                            exc.code().name, exc.details())
            except Exception as exc:
                again = self.refusal == (str(exc) or repr(exc))
                self.refusal = str(exc) or repr(exc)
                if is_disk_full(exc):  # passes once the disk has room (the watcher frees what expired): retried
                    if not again:  # once while it lasts, not at every retry
                        log.warning("replication_paused master=%s reason=%r retry_in_s=%.0f", self.master_ha_addr,
                                    self.refusal, DISK_FULL_RETRY_S)
                    self._acks.put(_CLOSE)
                    if self._stopped.wait(DISK_FULL_RETRY_S):
                        return
                    continue
                # a tail it must not cut, a broken invariant: an operator decides
                log.error("replication_stopped master=%s reason=%r", self.master_ha_addr, self.refusal,
                          exc_info=not isinstance(exc, ValueError))
                self._stopped.set()
            self.streaming = False  # (a stream the master ended too)
            self._acks.put(_CLOSE)
            if self._stopped.wait(REOPEN_PAUSE_S):
                return

    @property
    def stopped(self) -> bool:
        """Replication stopped for good (``refusal`` says why): an operator must act."""
        return self._stopped.is_set() and bool(self.refusal)

    def _handshake(self) -> ha_pb2.ReplicaHandshake:
        me = self.identity
        holds_records = self.commit_log.max_offset() > self.commit_log.min_offset()
        return ha_pb2.ReplicaHandshake(
            cluster_name=me.cluster_name, broker_name=me.broker_name, broker_id=me.broker_id,
            commit_log_end=self.commit_log.max_offset() if holds_records else 0, starts_anywhere=True,
            reports_metadata_copy=True,
            mapped_file_size=me.mapped_file_size,
            last_epoch=self.epochs.last_epoch() if self.epochs is not None else 0, master_epoch=self.master_epoch,
            epochs=[ha_pb2.EpochEntry(epoch=e.epoch, start_offset=e.start_offset)
                    for e in (self.epochs.entries() if self.epochs is not None else [])])

    def _frames(self, acks: "queue.Queue[int]") -> Iterator[ha_pb2.ReplicaFrame]:
        yield ha_pb2.ReplicaFrame(handshake=self._handshake())
        while (offset := acks.get()) != _CLOSE:
            yield ha_pb2.ReplicaFrame(ack_offset=offset, metadata_copied=self._metadata_copied.is_set())

    def _follow(self) -> None:
        acks: queue.Queue[int] = queue.Queue()
        call = ha_pb2_grpc.HaServiceStub(self._channel).Replicate(self._frames(acks), metadata=inner_metadata())
        self._last_frame = time.monotonic()
        self._call = call
        log.info("replication_started master=%s from_offset=%d", self.master_ha_addr, self.commit_log.max_offset())
        try:
            self._receive(call, acks)
        finally:
            acks.put(_CLOSE)  # ends this stream's request side, whether or not its welcome came

    def _receive(self, call: Iterator[ha_pb2.ReplicationFrame], acks: "queue.Queue[int]") -> None:
        welcome = True
        for frame in call:
            self._last_frame = time.monotonic()
            if welcome:
                with self._ack_lock:  # acks go to this stream only from where its welcome left the log
                    self._on_welcome(frame)
                    self._acks = acks
                welcome = False
                self.streaming = True
            if frame.data:
                if self.epochs is not None and frame.epoch > self.epochs.last_epoch():
                    self.epochs.assign(frame.epoch, frame.epoch_start_offset)  # before the epoch's bytes
                self.commit_log.append_replica(frame.offset, frame.data, frame.segment_size or None)
            # Said once bytes went in, or nothing is missing (on a full disk the welcome came, then its bytes failed)
            if self.refusal and (frame.data or self.commit_log.max_offset() >= frame.confirm_offset):
                log.warning("replication_resumed master=%s after=%r", self.master_ha_addr, self.refusal)
                self.refusal = ""
            self.commit_log.set_replicated_offset(frame.confirm_offset)
            with self._written:
                self._written.notify()

    def _on_welcome(self, frame: ha_pb2.ReplicationFrame) -> None:
        self.master_addr = frame.master_addr
        end = self.commit_log.max_offset()
        if frame.offset != end and end == self.commit_log.min_offset():  # no records: it begins where the master has
            assert self.start_at is not None
            log.warning("replica_starts_at master=%s offset=%d reason=master_expired_older_segments copy_state=%s",
                        self.master_ha_addr, frame.offset, frame.copy_state)
            if frame.copy_state:  # before the log: a copy cut short leaves it empty, to be asked again
                answers = ha_pb2_grpc.HaServiceStub(self._channel).CopyState(self._handshake(),
                                                                             metadata=inner_metadata())
                replicating, self._call = self._call, answers  # (a shutdown cancels the copy)
                self._copying = True
                try:
                    receive_state(self.copied_stores, answers)
                finally:
                    self._call, self._copying = replicating, False
                    self._last_frame = time.monotonic()
            self.start_at(frame.offset, frame.segment_size or None)  # (0: a master of an older release)
            end = frame.offset
        if self.epochs is None:
            return
        if frame.truncate_to < end:
            assert self.truncate is not None
            log.warning("replica_diverged master=%s epoch=%d local_end=%d master_agrees_to=%d", self.master_ha_addr,
                        self.epochs.last_epoch(), end, frame.truncate_to)
            self.truncate(frame.truncate_to)
            self.epochs.truncate_from(frame.truncate_to)
        self.epochs.replace([EpochEntry(e.epoch, e.start_offset) for e in frame.epochs], frame.truncate_to)

    def metadata_copied(self) -> None:
        """The slave holds a copy of this master's metadata (``slave_synchronize.py``): its acks say so from now
        on, and one goes at once (the master lets it join the in-sync set only then)."""
        self._metadata_copied.set()
        with self._written:
            self._written.notify()

    def _flush_loop(self) -> None:
        """Acknowledge what is on disk: one fsync covers every frame that arrived during the one before."""
        mfq = self.commit_log.mapped_file_queue
        acked = -1
        while not self._stopped.is_set():
            with self._written:
                if mfq.max_offset() == acked:
                    self._written.wait(1.0)  # at least once a second: an ack is also the link's heartbeat
            with self._ack_lock:
                try:
                    check_fsync("commitlog")
                    flushed = mfq.flush()
                except Exception as exc:
                    self._flush_failed(exc)
                    return
                self.commit_log.on_flushed(flushed)
                self._acks.put(flushed)
            acked = flushed
            self._watch_silence()

    def _flush_failed(self, exc: Exception) -> None:
        """After a failed fsync Linux may report success for pages it already dropped: nothing written since the
        last good one can be acknowledged, now or later. The store stops (a restart recovers from what is on
        disk) and so does replication; the master's in-sync set drops this replica once its acks stop."""
        self.refusal = f"fsync of the replicated commitlog failed: {exc}"
        self.fail_stop(self.refusal)
        log.error("replication_stopped master=%s reason=%r", self.master_ha_addr, self.refusal)
        self._stop_stream()

    def _stop_stream(self) -> None:
        self._stopped.set()
        self._acks.put(_CLOSE)
        call = self._call
        if call is not None:
            call.cancel()

    def shutdown(self) -> None:
        self._stop_stream()
        # To the end, both threads: a promoted replica must not have an old stream append after its epoch starts.
        if self.is_alive():
            self.join()
        with self._written:
            self._written.notify()
        if self._flusher.is_alive():
            self._flusher.join()
        self._channel.close()
