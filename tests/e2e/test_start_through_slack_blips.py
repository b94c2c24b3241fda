"""Start-up rides out Slack's blips (docs/operations.md): a failure of Slack's own at start is
tried again until the instance connects, with ``/readyz`` naming it meanwhile; what Slack says
about the token still skips the instance at once."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from nanoslack.slack.adapter import SocketOptions
from tests.e2e.conftest import FAST_SOCKET, Room
from tests.e2e.test_metrics import METRICS, _until, readyz

# The product's backoff is 1 s doubling to 60 s; the tests' is shorter, the same code.
QUICK_BACKOFF = SocketOptions(
    ping_interval=FAST_SOCKET.ping_interval,
    idle_reconnect=FAST_SOCKET.idle_reconnect,
    watchdog_interval=FAST_SOCKET.watchdog_interval,
    backoff_first=0.05,
    backoff_cap=0.2,
)


def _calls(room: Room, method: str, app: str) -> list[str | None]:
    return [c.error for c in room.emu.api_calls if c.method == method and c.app_name == app]


async def test_an_instance_whose_slack_fails_at_start_connects_by_itself_once_slack_answers(
    room: Room, fleet_factory
) -> None:
    eli = room.apps["eli"].app_id
    room.emu.fail_next("auth.test", 3, error="service_unavailable", app_id=eli)
    room.emu.fail_next("apps.connections.open", 2, error="internal_error", app_id=eli)
    with capture_logs() as logs:
        fleet, rec = await fleet_factory(["dana", "eli"], socket=QUICK_BACKOFF)
        await room.emu.wait_for(lambda: "eli" in fleet.instances, timeout=15)

    waits = [e for e in logs if e["event"] == "instance waiting for Slack"]
    assert [(e["instance"], e["error"]) for e in waits] == [("eli", "service_unavailable")] * 3 + [
        ("eli", "internal_error")
    ] * 2
    assert all(e["log_level"] == "warning" and e["next_try_in_s"] >= 0 for e in waits)
    assert not [e for e in logs if str(e["event"]).startswith("instance skipped")]
    auth = _calls(room, "auth.test", "eli")  # asked again before each socket try
    assert auth[:3] == ["service_unavailable"] * 3 and set(auth[3:]) == {None}
    assert _calls(room, "apps.connections.open", "eli") == ["internal_error"] * 2 + [None]
    # It answers like any other instance.
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('eli')} hello")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("eli")), timeout=15)


async def test_readyz_names_an_instance_waiting_for_slack_until_it_connects(
    room: Room, fleet_factory
) -> None:
    eli = room.apps["eli"].app_id
    room.emu.fail_next("auth.test", 1_000_000, error="service_unavailable", app_id=eli)
    fleet, _ = await fleet_factory(["dana", "eli"], socket=QUICK_BACKOFF, **METRICS)
    base = fleet.health_server.url
    status, body = await readyz(base)
    assert status == 503 and body["reasons"] == ["eli: waiting for Slack (service_unavailable)"]
    room.emu.clear_faults("auth.test")
    status, body = await _until(base, lambda status, _: status == 200)
    assert body == {"ready": True} and "eli" in fleet.instances


@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked"])
async def test_a_token_error_at_start_still_skips_the_instance_at_once(
    room: Room, fleet_factory, error: str
) -> None:
    eli = room.apps["eli"].app_id
    room.emu.fail_next("auth.test", 1, error=error, app_id=eli)
    with capture_logs() as logs:
        fleet, _ = await fleet_factory(["dana", "eli"], socket=QUICK_BACKOFF, expect=["dana"])
    [skipped] = [e for e in logs if str(e["event"]).startswith("instance skipped")]
    assert (skipped["instance"], skipped["error"]) == ("eli", error)
    assert not [e for e in logs if e["event"] == "instance waiting for Slack"]
    assert _calls(room, "auth.test", "eli") == [error]
    assert "eli" not in fleet.instances
