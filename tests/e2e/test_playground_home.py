"""Each bot's Home tab in the playground page (docs/agent-surface.md "The owner's Home"), in a
real headless Chromium against `nanoslack demo`: alice halts the room, opens dana's Home,
sees the halted room beside the rest of what she owns there, and its Resume resumes the room.
``NANOSLACK_SCREENSHOTS=docs`` saves docs/playground-home.png."""

from __future__ import annotations

from typing import Any

from tests.e2e.test_playground import STEP_MS, URL_RE, Demo, _shot
from tests.e2e.test_playground import browser_page as browser_page  # noqa: F401 - fixture
from tests.e2e.test_playground import demo as demo  # noqa: F401 - fixture

# A Home is published again at most every 10 s (the demo's default): a change shows within it.
REPUBLISH_MS = 30_000


def test_alice_resumes_a_halted_room_from_danas_home(demo: Demo, browser_page: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    expect(page.locator("#rooms .conv.current")).to_contain_text("a2a-room", timeout=STEP_MS)
    page.locator("#show-notes").uncheck()
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("stop")
    composer.press("Enter")
    expect(page.locator("#timeline .msg", has_text="Halted by")).to_have_count(1, timeout=STEP_MS)

    page.locator('#homes .conv[data-bot="dana"]').click()
    home = page.locator("#home-view")
    expect(home).to_contain_text("dana · your Home", timeout=STEP_MS)
    expect(home).to_contain_text("halted")
    expect(home).to_contain_text("Today's spend")
    expect(home).to_contain_text("daily-plan")
    expect(page.locator("#composer")).to_be_hidden()
    resume = home.locator('button[data-action-id="nanoslack_resume"]')
    expect(resume).to_have_count(1)
    _shot(page, "playground-home.png")

    resume.click()
    expect(resume).to_have_count(0, timeout=REPUBLISH_MS)
    expect(home).not_to_contain_text("halted")
    page.locator("#rooms .conv", has_text="a2a-room").click()
    expect(page.locator("#timeline .msg", has_text="Resumed by")).to_have_count(1, timeout=STEP_MS)
    assert demo.interrupt() == 0
