"""What changes in a broker when its role does (the ``RoleHooks`` the controller mode's ReplicasManager calls;
a static slave uses ``follow`` once, without epochs). Each step names the collaborator it touches; none needs the
whole broker."""

import logging
from collections.abc import Callable

from broker.ha.epoch_file import EpochFile
from broker.ha.ha_client import HAClient
from broker.ha.ha_service import GroupIdentity
from broker.ha.slave_synchronize import SlaveSynchronize
from broker.ha.state_copy import CopiedStore
from broker.out.namesrv_registrar import NamesrvRegistrar
from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ReplicaServices:
    def __init__(self, identity: GroupIdentity, store: MessageStore, epochs: EpochFile | None,
                 make_slave_sync: Callable[[Callable[[], str]], SlaveSynchronize],
                 start_master_services: Callable[[], None], registrar: Callable[[], NamesrvRegistrar | None],
                 on_rejoin: Callable[[str], None], on_follow: Callable[[], None] = lambda: None,
                 on_promoted: Callable[[], None] = lambda: None) -> None:
        self.identity = identity
        self.store = store
        self.epochs = epochs
        self.make_slave_sync = make_slave_sync
        self._start_master_services = start_master_services
        self.registrar = registrar
        self.on_rejoin = on_rejoin
        self.on_follow = on_follow  # what a broker that follows another master drops (its POP state)
        self.on_promoted = on_promoted  # what a promoted replica fits to what it has (the POP state it copied)
        self.copied_stores: dict[str, CopiedStore] = {}  # an empty replica's copy besides the log (the broker's)
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None

    def fence(self, reason: str | None) -> None:
        self.store.running_flags.set_replica(reason)

    def follow(self, master_ha_addr: str, master_epoch: int) -> None:
        """Replicate from this master (after cutting what it does not have), and copy its metadata."""
        self.stop_following()
        self.on_follow()
        client = HAClient(master_ha_addr, self.identity, self.store.commit_log, epochs=self.epochs,
                          master_epoch=master_epoch, truncate=self.store.truncate_diverged_tail,
                          start_at=self.store.start_replica_at, copied_stores=self.copied_stores,
                          fail_stop=self.store.running_flags.fail_stop)
        client.start()
        self.ha_client = client
        self.slave_sync = self.make_slave_sync(lambda: client.master_addr)
        self.slave_sync.on_first_copy = client.metadata_copied
        self.slave_sync.start()

    def stop_following(self) -> None:
        if self.ha_client is not None:
            self.ha_client.shutdown()
            self.ha_client = None
        if self.slave_sync is not None:
            self.slave_sync.shutdown()
            self.slave_sync = None

    def start_master_services(self) -> None:
        self._start_master_services()

    def promoted(self) -> None:
        self.on_promoted()

    def register_as(self, broker_id: int, master_epoch: int) -> None:
        registrar = self.registrar()
        if registrar is not None:
            registrar.register_as(broker_id, master_epoch)

    def rejoin(self, why: str) -> None:
        log.warning("replica_rejoining broker=%s id=%d reason=%r", self.identity.broker_name,
                    self.identity.broker_id, why)
        self.on_rejoin(why)
