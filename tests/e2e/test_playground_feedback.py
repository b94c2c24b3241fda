"""Slack's feedback buttons in the playground page (docs/agent-surface.md "Feedback"), in a real
headless Chromium against `nanoslack demo`: dana's DM reply shows 👍 / 👎 under it, alice's click
reaches dana as Slack's and is recorded, and a reply posted whole (its Markdown in a ``markdown``
block before the buttons) renders as Markdown with the buttons under it.
``NANOSLACK_SCREENSHOTS=docs`` saves docs/playground-dm-feedback.png."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from slack_sdk import WebClient

from nanoslack.config.values import read_env_file
from nanoslack.slack.blocks import feedback_blocks
from nanoslack.slack.feedback import whole_reply
from tests.e2e.test_playground import STEP_MS, URL_RE, Demo, _shot
from tests.e2e.test_playground import browser_page as browser_page  # noqa: F401 - fixture
from tests.e2e.test_playground import demo as demo  # noqa: F401 - fixture

DATA_RE = re.compile(r"data in (\S+)")
WHOLE = "Also, **one more thing**:\n\n- lunch with eli\n- call the bank"


def _feedback_rows(data: Path, within: float = STEP_MS / 1000) -> list[tuple[Any, ...]]:
    """The demo store's ``feedback`` rows once there is one (or ``within`` seconds have passed)."""
    deadline = time.monotonic() + within
    while True:
        with sqlite3.connect(data / "nanoslack.db") as db:
            rows = db.execute("SELECT instance, turn_id, user_id, value FROM feedback").fetchall()
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_alice_rates_danas_dm_replies_streamed_and_whole_from_the_page(
    demo: Demo,  # noqa: F811
    browser_page: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    data = Path(demo.wait_line(DATA_RE, timeout=5).group(1))
    page = browser_page
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    page.locator("#show-notes").uncheck()
    page.locator('#dms .conv[data-kind="im"]', has_text="dana").click()
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("Plan my day")
    composer.press("Enter")
    thread = page.locator("#thread-timeline")
    answer = thread.locator('.msg[data-author="dana"]')
    expect(answer).to_contain_text("Here is your day, alice", timeout=STEP_MS)
    expect(thread.locator(".msg.streaming")).to_have_count(0, timeout=STEP_MS)
    thumbs = answer.locator(".feedback .feedback-btn")
    expect(thumbs).to_have_text(["👍", "👎"], timeout=STEP_MS)
    expect(answer).to_contain_text("ping you only when something needs you")  # the words stay

    thumbs.first.click()
    expect(thumbs.first).to_have_attribute("aria-pressed", "true", timeout=STEP_MS)
    expect(thumbs.last).to_have_attribute("aria-pressed", "false")
    [(instance, turn_id, alice, value)] = _feedback_rows(data)
    assert (instance, value) == ("dana", "positive")

    # A reply posted whole, as the poster sends one with streaming off (docs/agent-surface.md):
    # dana's own token, the poster's own content for her turn.
    env = read_env_file(data / ".env")
    dana = WebClient(token=env["SLACK_BOT_TOKEN_DANA"], base_url=env["SLACK_API_URL"])
    im = dana.conversations_open(users=alice)["channel"]["id"]
    dana.chat_postMessage(channel=im, **whole_reply(WHOLE, feedback_blocks(turn_id)))
    page.locator('#dms .conv[data-kind="im"]', has_text="dana").click()
    whole = page.locator('#timeline .msg[data-author="dana"]', has_text="one more thing")
    expect(whole.locator("strong")).to_have_text("one more thing", timeout=STEP_MS)
    expect(whole.locator("ul li")).to_have_count(2)
    expect(whole).not_to_contain_text("**")
    whole_thumbs = whole.locator(".feedback .feedback-btn")
    expect(whole_thumbs).to_have_text(["👍", "👎"])
    whole_thumbs.last.click()
    expect(whole_thumbs.last).to_have_attribute("aria-pressed", "true", timeout=STEP_MS)
    _shot(page, "playground-dm-feedback.png")
    deadline = time.monotonic() + STEP_MS / 1000
    while _feedback_rows(data)[0][3] != "negative" and time.monotonic() < deadline:
        time.sleep(0.1)
    # alice's last click on dana's turn counts.
    assert _feedback_rows(data) == [("dana", turn_id, alice, "negative")]
    assert demo.interrupt() == 0
