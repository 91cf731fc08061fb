"""Users and policies in both metadata formats (JSON files and the metadata RocksDB)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.acl_manager import AclManager
from broker.metadata.metadata_store import open_metadata_stores
from broker.store.config import StoreType
from common.acl import AclEntry, User, decide
from tests.cluster import REPO, write_broker_conf


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


def _write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_hand_written_values_are_read_as_the_checks_spell_them(tmp_path: Path) -> None:
    """A hand-written "deny" in acls.json granted access (any decision but "Deny" counted as Allow); "super" and
    "pub" never matched."""
    config = tmp_path / "config"
    _write(config / "users.json", {"users": [{"username": "dave", "password": "pw", "userType": "super"}]})
    _write(config / "acls.json", {"acls": [{"subject": "User:dave", "entries": [
        {"resource": "topic:T", "actions": ["pub", "sub"], "decision": "deny"}]}]})
    stores = open_metadata_stores(StoreType.DEFAULT, tmp_path)
    assert stores.users is not None and stores.acls is not None
    acl = AclManager(stores.users, stores.acls)
    try:
        acl.load(None)
        assert acl.users["dave"].is_super
        assert acl.entries("dave") == (AclEntry("Topic:T", ("Pub", "Sub"), "Deny"),)
    finally:
        stores.close()


def test_only_allow_allows() -> None:
    assert decide((AclEntry("Topic:T", ("Pub",), "Maybe"),), "Topic:T", "Pub") == "Deny"
    assert decide((AclEntry("Topic:T", ("Pub",)),), "Topic:T", "Pub") == "Allow"


@pytest.mark.parametrize(("doc", "says"), [
    ({"users": [{"username": "erin"}]}, "an entry has no 'password'"),
    ({"users": [{"username": "erin", "password": "pw", "userType": "root"}]}, "user type 'root' is not Super"),
    ("{not json", "Expecting"),
])
def test_a_users_file_that_cannot_be_loaded_stops_the_broker_with_one_line(tmp_path: Path, doc: object,
                                                                          says: str) -> None:
    """A hand-edited users.json without a password stopped the broker with a KeyError's traceback."""
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    (config / "users.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    conf = write_broker_conf(tmp_path / "broker.conf", {
        "brokerName": "broker-a", "brokerIP1": "127.0.0.1", "listenPort": 0, "storePathRootDir": tmp_path / "store",
        "namesrvAddr": "127.0.0.1:1", "authenticationEnabled": "true", "authorizationEnabled": "true"})
    result = subprocess.run([sys.executable, "-m", "broker.main", "-c", str(conf)], cwd=REPO, timeout=60,
                            capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    errors = [line for line in result.stderr.splitlines() if not line[:4].isdigit()]  # not log lines
    assert result.returncode == 1 and len(errors) == 1, result.stderr
    assert errors[0].startswith("mqbroker: bad configuration: ") and "users.json cannot be loaded" in errors[0]
    assert says in errors[0], errors[0]


def test_a_file_edited_while_the_broker_runs_is_kept_beside_the_table_that_replaces_it(tmp_path: Path) -> None:
    """An edit of users.json while the broker ran was overwritten by the next change, silently."""
    stores = open_metadata_stores(StoreType.DEFAULT, tmp_path)
    assert stores.users is not None and stores.acls is not None
    acl = AclManager(stores.users, stores.acls)
    acl.load(("root", "pw"))
    users = tmp_path / "config" / "users.json"
    edited = json.loads(users.read_text())
    edited["users"].append({"username": "carol", "password": "pw"})
    users.write_text(json.dumps(edited))
    acl.put_user(User("dave", "pw"))
    kept = list(users.parent.glob("users.json.edited-*"))
    assert len(kept) == 1 and "carol" in kept[0].read_text()
    assert kept[0].stat().st_mode & 0o777 == 0o600  # passwords: as private as the table
    acl.put_user(User("erin", "pw"))  # its own write is no edit
    assert len(list(users.parent.glob("users.json.edited-*"))) == 1
    stores.close()
