"""The pure parts of the agent surface: a stream's pieces, and one log line per refusal."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse
from structlog.testing import capture_logs

from nanoslack.slack.status import Refusals
from nanoslack.slack.streams import PIECE_CHARS, _pieces


@pytest.mark.parametrize(
    "text",
    ["short", "x" * 5_000, ("a line of the answer\n" * 400), ("word " * 3_000), "tail " * 199 + "y" * 2_500],
)
def test_a_reply_cut_into_stream_pieces_joins_back_exactly(text: str) -> None:
    pieces = _pieces(text)
    assert "".join(pieces) == text
    assert all(0 < len(p) <= PIECE_CHARS for p in pieces)


def _refusal(error: str) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="http://127.0.0.1/api/chat.startStream",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=200,
    )
    return SlackApiError("refused", response)


def test_a_refusal_turns_its_part_off_with_one_log_line_per_reason() -> None:
    refusals = Refusals("gus")
    with capture_logs() as logs:
        assert refusals.refused("stream", _refusal("missing_scope"))
        assert refusals.refused("stream", _refusal("missing_scope"))
        assert refusals.refused("stream", _refusal("feature_not_enabled"))
        assert not refusals.refused("status", _refusal("ratelimited"))
    lines = [(e["part"], e["reason"]) for e in logs if e["event"] == "agent surface refused"]
    assert lines == [("stream", "missing_scope"), ("stream", "feature_not_enabled")]
    assert refusals.is_off("stream") and not refusals.is_off("status")
