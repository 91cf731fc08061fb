"""host:port addresses the SDK is given are checked before gRPC sees them: gRPC took a port modulo 65536, so
127.0.0.1:99999 reached 127.0.0.1:34463. No daemon needed: each is refused before any call."""

import pytest

from client import Admin, KVClient, MQClientError, Producer
from common.address import check_address

BAD = [("127.0.0.1:99999", "has port 99999, outside 1..65535"), ("127.0.0.1:65536", "has port 65536, outside"),
       ("127.0.0.1:0", "has port 0, outside"), ("127.0.0.1:abc", "has port 'abc', not a number in 1..65535"),
       ("127.0.0.1:", "has port '', not a number"), ("127.0.0.1", "is not HOST:PORT"), (":9876", "is not HOST:PORT")]


@pytest.mark.parametrize("addr", ["127.0.0.1:1", "127.0.0.1:65535", "localhost:9876", "[::1]:9876"])
def test_valid_addresses_pass(addr: str):
    assert check_address(addr) == addr


@pytest.mark.parametrize(("addr", "says"), BAD)
def test_bad_addresses_say_what_is_wrong(addr: str, says: str):
    with pytest.raises(ValueError, match=f"^{addr!r} {says}"):
        check_address(addr)


@pytest.mark.parametrize("make", [Admin, KVClient, Producer], ids=lambda c: c.__name__)
def test_name_server_addresses_are_checked_when_a_client_is_made(make):
    with pytest.raises(MQClientError, match=r"^name server address '127.0.0.1:99999' has port 99999, outside"):
        make("127.0.0.1:9876;127.0.0.1:99999")


def test_a_broker_address_given_to_a_call_is_checked():
    with Admin("127.0.0.1:9876") as admin, \
            pytest.raises(MQClientError, match=r"^address '127.0.0.1:70000' has port 70000, outside 1..65535"):
        admin.broker_runtime_info("127.0.0.1:70000")
