"""A bot's suggested prompts in the playground page (docs/agent-surface.md "The agent's
Messages tab"), in a real headless Chromium against `nanoslack demo`: alice opens her DM
with dana, the page sends what Slack sends (``app_home_opened``, ``tab: messages``), dana
sets her prompts from teammates/dana/SOUL.md and they show as chips above the composer; a
click posts one as alice's message and dana answers it. ``NANOSLACK_SCREENSHOTS=docs``
saves docs/playground-prompts.png."""

from __future__ import annotations

from typing import Any

from tests.e2e.test_playground import STEP_MS, URL_RE, Demo, _shot
from tests.e2e.test_playground import browser_page as browser_page  # noqa: F401 - fixture
from tests.e2e.test_playground import demo as demo  # noqa: F401 - fixture


def test_alice_opens_danas_dm_sees_her_suggested_prompts_and_one_click_asks_it(  # noqa: F811
    demo: Demo, browser_page: Any
) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    prompts = page.locator("#prompts")
    expect(prompts).to_be_hidden()  # the room has none: prompts are a bot DM's
    page.locator("#show-notes").uncheck()

    page.locator('#dms .conv[data-kind="im"]', has_text="dana").click()
    expect(page.locator("#conv-title")).to_have_text("dana")
    chips = prompts.locator(".prompt-chip")
    expect(chips).to_have_text(["Plan my day", "What is blocked?"], timeout=STEP_MS)
    _shot(page, "playground-prompts.png")

    chips.first.click()
    expect(page.locator("#timeline .msg", has_text="Plan my day")).to_have_attribute("data-author", "alice")
    thread = page.locator("#thread-timeline")
    expect(thread.locator(".msg").first).to_contain_text("Plan my day", timeout=STEP_MS)
    answer = thread.locator('.msg[data-author="dana"]')
    expect(answer).to_contain_text("Here is your day, alice", timeout=STEP_MS)

    # Back in the room the chips are gone; they are dana's DM's.
    page.locator("#rooms .conv", has_text="a2a-room").click()
    expect(prompts).to_be_hidden()
    assert demo.interrupt() == 0
