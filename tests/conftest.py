"""Suite-wide: keep proxies away from loopback traffic (slack-sdk's socket client
ignores NO_PROXY, even for 127.0.0.1)."""

from __future__ import annotations

import pytest

PROXY_KEYS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in PROXY_KEYS:
        monkeypatch.delenv(key, raising=False)
