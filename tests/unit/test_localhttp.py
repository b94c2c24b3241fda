"""Which Host and Origin headers a local server accepts (nanoslack.localhttp)."""

from __future__ import annotations

import pytest

from nanoslack.localhttp import LocalGuard, split_host


def _guard(host: str, port: int = 8787) -> LocalGuard:
    guard = LocalGuard(host)
    guard.bind(port)
    return guard


@pytest.mark.parametrize("header", ["127.0.0.1:8787", "localhost:8787", "[::1]:8787", "LOCALHOST:8787"])
def test_a_loopback_server_answers_its_loopback_names(header: str) -> None:
    assert _guard("127.0.0.1").host_allowed(header)


@pytest.mark.parametrize(
    "header", ["evil.example:8787", "127.0.0.1:9999", "127.0.0.1", "10.0.0.5:8787", "", "127.0.0.1:x"]
)
def test_a_loopback_server_refuses_other_names_and_ports(header: str) -> None:
    assert not _guard("127.0.0.1").host_allowed(header)


def test_a_server_on_every_address_takes_ip_literals_but_no_name() -> None:
    guard = _guard("0.0.0.0", 9464)
    assert guard.host_allowed("10.0.0.5:9464") and guard.host_allowed("[fe80::1]:9464")
    assert guard.host_allowed("localhost:9464")
    assert not guard.host_allowed("rebind.evil.example:9464")


def test_a_server_on_one_address_takes_that_address_only() -> None:
    guard = _guard("10.0.0.5", 9464)
    assert guard.host_allowed("10.0.0.5:9464")
    assert not guard.host_allowed("127.0.0.1:9464") and not guard.host_allowed("evil.example:9464")


def test_port_80_may_be_left_out_of_the_host_header() -> None:
    assert _guard("127.0.0.1", 80).host_allowed("127.0.0.1")


def test_host_headers_are_split_into_name_and_port() -> None:
    assert split_host("[::1]:9464") == ("::1", 9464)
    assert split_host("Example.COM") == ("example.com", None)
    assert split_host("a:b") == ("a", -1)
