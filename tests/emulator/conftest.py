from __future__ import annotations

import pytest

from nanoslack.emulator import Options


@pytest.fixture
def emu_options() -> Options:
    """Redelivery tests here wait out the ack timeout: half a second keeps them short."""
    return {"ack_timeout": 0.5}


@pytest.fixture(autouse=True)
def _no_slack_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients under test find their tokens in the test, never in the environment."""
    for v in (
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_CLIENT_ID",
        "SLACK_CLIENT_SECRET",
        "SLACK_SIGNING_SECRET",
    ):
        monkeypatch.delenv(v, raising=False)
