"""Users and policies in both metadata formats (JSON files and the metadata RocksDB)."""

from pathlib import Path

import pytest

from broker.acl_manager import AclManager
from broker.metadata.metadata_store import open_metadata_stores
from broker.store.config import StoreType
from common.acl import AclEntry


@pytest.mark.parametrize("store_type", [StoreType.DEFAULT, StoreType.DEFAULT_ROCKSDB])
def test_users_and_policies_survive_a_reopen(tmp_path: Path, store_type: StoreType) -> None:
    stores = open_metadata_stores(store_type, tmp_path)
    assert stores.users is not None and stores.acls is not None
    acl = AclManager(stores.users, stores.acls, inner=("inner", "inner-secret"))
    acl.load(("root", "pw"))
    acl.add_entries("User:root", (AclEntry("Topic:T", ("Pub",)),))
    acl.add_entries("User:root", (AclEntry("Topic:pre*", ("Sub",), "Deny"),))
    acl.delete_entries("User:root", "Topic:T")
    acl.flush()
    stores.close()

    stores = open_metadata_stores(store_type, tmp_path)
    assert stores.users is not None and stores.acls is not None
    again = AclManager(stores.users, stores.acls)
    again.load(("root", "other"))  # the first start's user stays as it was
    try:
        assert again.users["root"].password == "pw" and again.users["root"].is_super
        assert "inner" not in again.users  # the inner credentials are never stored
        assert again.entries("root") == (AclEntry("Topic:pre*", ("Sub",), "Deny"),)
    finally:
        stores.close()


@pytest.mark.parametrize("store_type", [StoreType.DEFAULT, StoreType.DEFAULT_ROCKSDB])
def test_the_users_passwords_are_readable_by_the_brokers_user_only(tmp_path: Path, store_type: StoreType) -> None:
    """users.json (and its temp file) was made with the umask's mode (0644: every local user could read the
    passwords); the metadata RocksDB's directory too."""
    stores = open_metadata_stores(store_type, tmp_path)
    assert stores.users is not None and stores.acls is not None
    acl = AclManager(stores.users, stores.acls)
    acl.load(("root", "pw"))
    acl.flush()
    stores.close()
    if store_type is StoreType.DEFAULT:
        secret = tmp_path / "config" / "users.json"
        assert secret.stat().st_mode & 0o777 == 0o600
    else:
        secret = tmp_path / "metadata"
        assert secret.stat().st_mode & 0o777 == 0o700
