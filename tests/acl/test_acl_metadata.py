"""Users and policies in both metadata formats (JSON files and the metadata RocksDB)."""

import os
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


def test_a_users_file_an_earlier_release_left_readable_is_narrowed_and_its_import_too(tmp_path: Path) -> None:
    """users.json was made 0644 before: kept so until a user changed; moved to storeType=defaultRocksDB, its
    renamed copy beside the database stayed readable by every local user (the diff review)."""
    config = tmp_path / "config"
    config.mkdir()
    users = config / "users.json"
    users.write_text('{"users": [{"username": "root", "password": "pw", "userType": "Super"}]}')
    users.chmod(0o644)
    stores = open_metadata_stores(StoreType.DEFAULT, tmp_path)
    stores.close()
    assert users.stat().st_mode & 0o777 == 0o600
    users.chmod(0o644)
    stores = open_metadata_stores(StoreType.DEFAULT_ROCKSDB, tmp_path)
    stores.close()
    assert (config / "users.json.imported").stat().st_mode & 0o777 == 0o600


def test_a_metadata_directory_another_user_owns_is_opened_as_it_is(tmp_path: Path) -> None:
    """A store directory made by another account (a shared group-writable store, a mount point): the chmod failed
    and the broker could not start (the diff review)."""
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata").chmod(0o777)
    os.chown(tmp_path / "metadata", 65534, 65534)  # (the tests run as root: as if another account made it)
    stores = open_metadata_stores(StoreType.DEFAULT_ROCKSDB, tmp_path)
    stores.close()
    assert (tmp_path / "metadata").stat().st_mode & 0o777 == 0o777
