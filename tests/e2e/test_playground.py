"""The playground page in a real headless Chromium, against `nanoslack demo` run as a user runs it.

Chromium comes from the system (Debian's ``chromium``; ``.ci/run`` installs it); the
test never downloads a browser and skips, saying why, only when none can be had.
``NANOSLACK_SCREENSHOTS=docs`` also saves the screenshots docs/playground.md shows there.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
URL_RE = re.compile(r"playground at (http://127\.0\.0\.1:\d+/)")
STEP_MS = 20_000


def _chromium() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no Chromium on this machine (apt-get install -y chromium); browser downloads are not used")


class Demo:
    """`nanoslack demo` as a subprocess, its stdout collected line by line."""

    def __init__(self, cwd: Path) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "NANOSLACK_")) and "proxy" not in k.lower()
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nanoslack", "demo", "--port", "0"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_line(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if m := pattern.search(line):
                return m
        raise AssertionError(f"no line matching {pattern.pattern!r}; output so far: {''.join(self.seen)}")

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=30)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    running = Demo(tmp_path)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


@pytest.fixture
def browser_page() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    executable = _chromium()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1200, "height": 760})
        finally:
            browser.close()


def _shot(page: Any, name: str) -> None:
    where = os.environ.get("NANOSLACK_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.mouse.move(600, 10)  # no hover state in the picture
        page.screenshot(path=str(Path(where) / name))


def _round(page: Any) -> None:
    """A question to the round room: the crew answers at once, dana closes with a dispatch,
    and the tasks eli and fay reported are on the board."""
    from playwright.sync_api import expect

    page.locator("#show-notes").check()
    page.locator("#rooms .conv", has_text="crew-round").click()
    expect(page.locator("#conv-title")).to_have_text("# crew-round")
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("What does each of you take on this week?")
    composer.press("Enter")
    thread = page.locator("#thread-timeline")
    expect(thread.locator(".msg").first).to_contain_text("What does each of you take on", timeout=STEP_MS)
    expect(thread.locator('.msg[data-author="eli"]')).to_contain_text("My part, the build", timeout=STEP_MS)
    expect(thread.locator('.msg[data-author="fay"]')).to_contain_text("My part, the review", timeout=STEP_MS)
    dispatch = thread.locator(".msg").last
    expect(dispatch).to_contain_text("Dispatch", timeout=STEP_MS)
    expect(dispatch).to_have_attribute("data-author", "dana")
    expect(dispatch).to_contain_text("→ @eli · today")
    board = page.locator("#timeline .msg", has_text="Task board")
    expect(board).to_have_count(1, timeout=STEP_MS)
    expect(board).to_contain_text("2 open", timeout=STEP_MS)
    expect(board).to_contain_text("First cut")
    expect(board).to_contain_text("Review the first cut")
    _shot(page, "playground-round.png")


def test_the_playground_page_plays_an_a2a_room_with_the_guard_visible(demo: Demo, browser_page: Any) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    expect(page.locator("#rooms .conv.current")).to_contain_text("a2a-room", timeout=STEP_MS)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    # The rooms were open before the fleet started: the intro is room context, its
    # shortcode an emoji, and no note says the room was not listed.
    intro = page.locator("#timeline .msg").first
    expect(intro).to_contain_text("👋")
    expect(intro).not_to_contain_text(":wave:")
    expect(page.locator('#timeline .note[data-kind="dropped"]')).to_have_count(0)

    # @ completion picks the bot; Enter posts as alice and opens the new message's thread.
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("@da")
    expect(page.locator("#mention-menu li[data-name]")).to_have_count(1)
    expect(page.locator("#mention-menu li").first).to_have_attribute("data-name", "dana")
    composer.press("Enter")
    expect(composer).to_have_value("@dana ")
    composer.press_sequentially("what's the plan for Friday?")
    composer.press("Enter")

    thread = page.locator("#thread-timeline")
    expect(thread.locator('.msg[data-author="alice"]')).to_contain_text("@dana what's the plan")
    expect(thread.locator('.msg[data-author="dana"]')).to_contain_text("On it, alice", timeout=STEP_MS)
    expect(thread.locator('.msg[data-author="eli"]')).to_contain_text("First cut", timeout=STEP_MS)
    # eli's hand-off reached fay, who keeps request_approval: held, the owner asked.
    eli_ts = thread.locator('.msg[data-author="eli"]').first.get_attribute("data-ts")
    expect(thread.locator('.note[data-kind="admitted"]').first).to_contain_text("hop 1/3")
    expect(thread.locator('.note[data-kind="approval_requested"]')).to_contain_text("fay", timeout=STEP_MS)
    expect(page.locator("#status .pending")).to_contain_text("eli → fay", timeout=STEP_MS)
    assert eli_ts

    # The approval DM: Allow goes through Socket Mode to fay's app, the held message is answered.
    page.locator('#dms .conv[data-kind="im"]', has_text="fay").click()
    dm = page.locator("#timeline")
    expect(dm.locator('.msg[data-author="fay"]')).to_contain_text("wants to talk to fay", timeout=STEP_MS)
    _shot(page, "playground-approval.png")
    dm.locator('button[data-action-id="nanoslack_approve"]').click()
    expect(dm.locator('.msg[data-author="fay"]')).to_contain_text("Allowed by @alice", timeout=STEP_MS)
    expect(page.locator("#status .pending")).to_contain_text("no pending approvals", timeout=STEP_MS)

    page.locator("#rooms .conv", has_text="a2a-room").click()
    page.locator("#timeline .replies-link").last.click()
    expect(thread.locator('.msg[data-author="fay"]')).to_contain_text("Reviewed, eli", timeout=STEP_MS)
    # fay hands back to dana on the last hop; dana wraps up, and the guard stops there.
    expect(thread.locator('.msg[data-author="dana"]').nth(1)).to_contain_text("Closing here", timeout=STEP_MS)
    hop_limit = thread.locator('.note[data-kind="hop_limit"]').first
    expect(hop_limit).to_contain_text("hop limit reached", timeout=STEP_MS)
    # One bot says why the room went quiet (room control's pause notice), once.
    expect(thread.locator(".msg", has_text="Paused after")).to_have_count(1, timeout=STEP_MS)
    expect(page.locator("#status .hops", has_text="#a2a-room")).to_contain_text("hops 3/3")
    _shot(page, "playground-room.png")

    # A human speaks in the thread: hops start again and the crew resumes.
    reply = page.locator("#thread-composer textarea")
    reply.click()
    reply.press_sequentially("@dana let's go again")
    expect(page.locator("#mention-menu")).to_be_hidden()
    reply.press("Enter")
    hops_reset = thread.locator('.note[data-kind="hops_reset"]')
    expect(hops_reset).to_contain_text("hop count 3 → 0", timeout=STEP_MS)
    expect(thread.locator('.msg[data-author="dana"]', has_text="On it, alice")).to_have_count(
        2, timeout=STEP_MS
    )
    expect(thread.locator('.msg[data-author="eli"]', has_text="First cut")).to_have_count(2, timeout=STEP_MS)

    # The switch hides the fleet's notes and leaves the chat.
    page.locator("#show-notes").uncheck()
    expect(thread.locator(".note").first).to_be_hidden()
    expect(thread.locator('.msg[data-author="dana"]').first).to_be_visible()

    _round(page)

    foreign = [u for u in requests if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))]
    assert requests and not foreign, foreign

    assert demo.interrupt() == 0
    demo.wait_line(re.compile(r"nanoslack demo: stopped"), timeout=5)


def _ask_dana_in_her_dm(demo: Demo, page: Any, text: str) -> Any:
    """alice opens the page, then her DM with dana, and sends ``text``: the thread's timeline."""
    from playwright.sync_api import expect

    page.goto(demo.wait_line(URL_RE, timeout=90).group(1))
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    page.locator("#show-notes").uncheck()
    page.locator('#dms .conv[data-kind="im"]', has_text="dana").click()
    expect(page.locator("#conv-title")).to_have_text("dana")
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially(text)
    composer.press("Enter")
    return page.locator("#thread-timeline")


def test_the_playground_dm_shows_danas_status_line_then_her_streamed_answer(
    demo: Demo, browser_page: Any
) -> None:
    """alice's DM with dana: the thread shows "dana is thinking…" while dana's turn runs
    (her rule thinks 2.5 s, as a slow model), then her answer, streamed in place, and the
    status line is gone."""
    from playwright.sync_api import expect

    page = browser_page
    thread = _ask_dana_in_her_dm(demo, page, "Plan my day")
    status = thread.locator(".status-line")
    expect(status).to_contain_text("dana is thinking…", timeout=STEP_MS)
    _shot(page, "playground-dm-status.png")
    answer = thread.locator('.msg[data-author="dana"]')
    expect(answer).to_contain_text("Here is your day, alice", timeout=STEP_MS)
    expect(answer).to_contain_text("ping you only when something needs you", timeout=STEP_MS)
    expect(status).to_have_count(0)
    expect(thread.locator(".msg.streaming")).to_have_count(0, timeout=STEP_MS)
    _shot(page, "playground-dm-stream.png")
    assert demo.interrupt() == 0


def test_the_playground_dm_shows_a_stop_button_that_stops_danas_running_turn(
    demo: Demo, browser_page: Any
) -> None:
    """alice asks dana for the quarterly report (her rule thinks a minute: a model that does
    not answer); the thread shows the session's Stop button; a click stops the turn, dana
    says ``Stopped.`` and the button is gone (docs/agent-surface.md "Sessions and Stop")."""
    from playwright.sync_api import expect

    page = browser_page
    thread = _ask_dana_in_her_dm(demo, page, "Write the quarterly report")
    stop = thread.locator(".status-line .stop-button")
    expect(stop).to_be_visible(timeout=STEP_MS)
    expect(thread.locator(".status-line")).to_contain_text("dana is thinking…")
    _shot(page, "playground-stop.png")
    stop.click()
    answer = thread.locator('.msg[data-author="dana"]')
    expect(answer).to_have_text(re.compile("Stopped."), timeout=STEP_MS)
    expect(stop).to_have_count(0, timeout=STEP_MS)
    expect(thread).not_to_contain_text("The quarterly report")
    assert demo.interrupt() == 0


def test_alice_asks_dana_to_remember_and_the_page_shows_the_note_and_lists_it(
    demo: Demo, browser_page: Any
) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    panel = page.locator("#memories")
    expect(panel).to_contain_text("No notes yet", timeout=STEP_MS)

    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("@dana remember that deploys are on Thursday")
    expect(page.locator("#mention-menu")).to_be_hidden()
    composer.press("Enter")

    thread = page.locator("#thread-timeline")
    asked = thread.locator('.msg[data-author="alice"]')
    expect(asked).to_contain_text("remember that deploys are on Thursday")
    expect(thread.locator('.msg[data-author="dana"]')).to_contain_text(
        "I'll remember: deploys are on Thursday", timeout=STEP_MS
    )
    # The note sits under alice's message, in the thread and in the room's timeline.
    for pane in (thread, page.locator("#timeline")):
        note = pane.locator('.note[data-kind="memory"]')
        expect(note).to_have_count(1, timeout=STEP_MS)
        expect(note).to_contain_text("🧠 remembered (self): deploys are on Thursday")
        expect(note.locator(".who")).to_have_text("dana")
    msg_ts = asked.get_attribute("data-ts")
    under = page.locator(f'#timeline .msg[data-ts="{msg_ts}"] + .note[data-kind="memory"]')
    assert msg_ts and under.count() == 1

    danas = panel.locator('.memory-instance[data-instance="dana"]')
    expect(danas).to_contain_text("dana's notes", timeout=STEP_MS)
    listed = danas.locator(".memory-note")
    expect(listed).to_have_count(1)
    expect(listed).to_contain_text("deploys are on Thursday")
    ref = listed.get_attribute("data-id")
    assert ref and re.fullmatch(r"m\d+", ref)
    expect(listed.locator(".memory-id")).to_have_text(ref)
    _shot(page, "playground-memory.png")

    # Forgetting it: a 🧠 note says so and the panel empties again.
    reply = page.locator("#thread-composer textarea")
    reply.click()
    reply.press_sequentially(f"@dana forget {ref}")
    expect(page.locator("#mention-menu")).to_be_hidden()
    reply.press("Enter")
    expect(thread.locator('.note[data-kind="memory"]', has_text=f"🧠 forgot {ref}")).to_have_count(
        1, timeout=STEP_MS
    )
    expect(panel.locator(".memory-note")).to_have_count(0, timeout=STEP_MS)
    expect(panel).to_contain_text("No notes yet")

    foreign = [u for u in requests if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))]
    assert requests and not foreign, foreign
    assert demo.interrupt() == 0


def test_a_routine_fired_from_the_page_opens_its_post_highlighted_and_the_favicon_is_served(
    demo: Demo, browser_page: Any
) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    assert page.request.get(url + "favicon.ico").status == 200
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon and page.request.get(url.rstrip("/") + icon).status == 200

    # alice is in the room; dana's daily-plan posts to her DM with dana: the page goes there.
    expect(page.locator("#rooms .conv.current")).to_contain_text("a2a-room", timeout=STEP_MS)
    page.locator("#status button.routine", has_text="dana's daily-plan").click()
    expect(page.locator('#dms .conv.current[data-kind="im"]')).to_contain_text("dana", timeout=STEP_MS)
    result = page.locator("#timeline .msg.routine-result")
    expect(result).to_have_count(1, timeout=STEP_MS)
    expect(result).to_have_attribute("data-author", "dana")
    assert missing == [], missing


def test_a_room_reply_in_markdown_renders_bold_a_list_a_code_block_and_a_table(
    demo: Demo, browser_page: Any
) -> None:
    """dana's weekly report is posted as markdown_text; the page renders it as Slack does,
    never as raw asterisks and pipes."""
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    page.locator("#show-notes").uncheck()
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("@dana the weekly report, please")
    expect(page.locator("#mention-menu")).to_be_hidden()
    composer.press("Enter")
    reply = page.locator('#thread-timeline .msg[data-author="dana"]')
    expect(reply).to_contain_text("Weekly report", timeout=STEP_MS)
    expect(reply.locator("strong")).to_have_text("Weekly report")
    expect(reply.locator("ul li")).to_have_count(3)
    expect(reply.locator("pre code")).to_contain_text("nanoslack turns --steps")
    expect(reply.locator("table th")).to_have_text(["task", "who", "status"])
    expect(reply.locator("table tbody tr")).to_have_count(3)
    expect(reply.locator('a[href="https://example.com/release"]')).to_have_text("release checklist")
    expect(reply).not_to_contain_text("**")
    expect(reply).not_to_contain_text("|---")
    _shot(page, "playground-markdown.png")
    assert demo.interrupt() == 0
