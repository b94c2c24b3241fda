"""Ack latency: per acked envelope, the seconds from sending it to receiving its ack."""

from __future__ import annotations

import time

from slack_sdk import WebClient
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from nanoslack.emulator import EmulatorClient, ThreadedEmulator


def test_ack_latencies_measure_send_to_ack_per_app(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli")
    conv = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    delay = 0.08

    def slow_ack(client: SocketModeClient, req: SocketModeRequest) -> None:
        time.sleep(delay)  # the app takes this long before it acks
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    smc = SocketModeClient(
        app_token=dana.app_token, web_client=WebClient(token=dana.bot_token, base_url=temu.api_url)
    )
    smc.socket_mode_request_listeners.append(slow_ack)
    smc.connect()
    drv = EmulatorClient(temu.base_url)
    try:
        temu.wait_for(lambda: temu.connections(dana.app_id) == 1)
        assert temu.ack_latencies() == []
        temu.post_as_user(alice.id, conv.id, f"hi <@{dana.bot_user_id}>")  # message + app_mention
        temu.post_as_user(alice.id, conv.id, "plain")
        temu.wait_for(lambda: temu.stats(dana.app_id).acked == 3)
        lat = temu.ack_latencies(dana.app_id)
        assert len(lat) == 3
        assert all(delay <= x < delay + 2.0 for x in lat), lat
        # eli is offline: its envelopes are queued, never sent, so nothing is measured
        assert temu.ack_latencies(eli.name) == []
        assert sorted(temu.ack_latencies()) == sorted(lat)
        # the HTTP driver serves the same figures; clear starts a fresh measurement
        assert sorted(drv.ack_latencies(dana.app_id)) == sorted(lat)
        assert sorted(drv.ack_latencies(clear=True)) == sorted(lat)
        assert drv.ack_latencies() == []
        # a withheld ack is no ack: it measures nothing. The envelope comes back after the
        # ack timeout and its second ack counts; only an ack after the withheld one can.
        temu.withhold_acks(dana.app_id, 1)
        temu.post_as_user(alice.id, conv.id, "again")
        temu.wait_for(lambda: temu.stats(dana.app_id).acked == 4)
        assert temu.stats(dana.app_id).redelivered == 1
        again = temu.ack_latencies(dana.app_id)
        assert len(again) == 1 and delay <= again[0] < delay + 2.0, again
    finally:
        smc.close()
