"""Files in the playground page (docs/playground.md), in a real headless Chromium against
``nanoslack demo``: alice attaches an image with the file button and drops a CSV on the
thread; both show in the timeline and reach the fleet as Slack ``file_share`` messages;
dana's ``send_file`` shows as a chip; a pasted file waits in the composer.
``NANOSLACK_SCREENSHOTS=docs`` saves docs/playground-files.png."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

from tests.e2e.test_playground import STEP_MS, URL_RE, Demo, _shot, browser_page, demo

__all__ = ["browser_page", "demo"]  # the fixtures, shared with the page's other tests

NUMBERS = "week,done,open\n48,12,3\n49,15,2\n50,9,4\n"


def _png(width: int = 240, height: int = 120) -> bytes:
    """A small chart-like PNG: three bars on white."""
    bars = [(30, 70, (232, 145, 45)), (100, 140, (43, 172, 118)), (170, 210, (18, 100, 163))]
    tops = [40, 20, 70]
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width):
            color = (255, 255, 255)
            for (left, right, bar), top in zip(bars, tops, strict=True):
                if left <= x < right and y >= top:
                    color = bar
            rows.extend(color)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows)))
        + chunk(b"IEND", b"")
    )


def _shared_names(db: Path) -> list[str]:
    """The names of the files the fleet's stored messages carry (``message_files``)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT files FROM message_files").fetchall()
    return sorted({str(f[1]) for (files,) in rows for f in json.loads(files)})


def test_alice_attaches_an_image_and_drops_a_csv_and_both_show_and_reach_the_fleet_as_file_shares(
    demo: Demo, browser_page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    url = demo.wait_line(URL_RE, timeout=90).group(1)
    page = browser_page
    page.goto(url)
    expect(page.locator("#status .instance[data-connected=true]")).to_have_count(3, timeout=STEP_MS)
    page.locator("#show-notes").uncheck()

    # The image, with the file button: a chip in the composer, then a picture in the room.
    page.locator("#composer .file-input").set_input_files(
        {"name": "burndown.png", "mimeType": "image/png", "buffer": _png()}
    )
    expect(page.locator("#composer .attachment .file-chip")).to_contain_text("burndown.png")
    composer = page.locator("#composer textarea")
    composer.click()
    composer.press_sequentially("@dana the burndown for this week")
    composer.press("Enter")
    image = page.locator('#timeline img.file-image[data-name="burndown.png"]')
    expect(image).to_be_visible(timeout=STEP_MS)
    expect(page.locator("#composer .attachment")).to_be_hidden()
    page.wait_for_function("() => document.querySelector('#timeline img.file-image').naturalWidth === 240")

    # The CSV, dropped on the thread the image opened: a named chip in the thread.
    expect(page.locator("#thread")).to_be_visible()
    page.evaluate(
        """([name, text]) => {
            const dt = new DataTransfer();
            dt.items.add(new File([text], name, { type: "text/csv" }));
            const pane = document.getElementById("thread");
            const init = { dataTransfer: dt, bubbles: true, cancelable: true };
            pane.dispatchEvent(new DragEvent("dragover", init));
            pane.dispatchEvent(new DragEvent("drop", init));
        }""",
        ["numbers.csv", NUMBERS],
    )
    expect(page.locator("#thread-composer .attachment .file-chip")).to_contain_text("numbers.csv")
    reply = page.locator("#thread-composer textarea")
    reply.click()
    reply.press_sequentially("and the numbers behind it")
    reply.press("Enter")
    chip = page.locator('#thread-timeline .file-chip[data-name="numbers.csv"]')
    expect(chip).to_be_visible(timeout=STEP_MS)
    expect(chip).to_contain_text("CSV")

    # dana's send_file shows the same way, as her file in the thread.
    reply.click()
    reply.press_sequentially("@dana the scores as a file, please")
    reply.press("Enter")
    sent = page.locator('#thread-timeline .msg[data-author="dana"] .file-chip[data-name="weekly-scores.csv"]')
    expect(sent).to_be_visible(timeout=STEP_MS)

    # The page's links serve the bytes; the fleet stored both of alice's files from Slack's
    # file_share messages (and dana's own upload).
    href = chip.get_attribute("href")
    assert href is not None
    served = page.request.get(url.rstrip("/") + href)
    assert served.status == 200 and served.text() == NUMBERS
    assert "sandbox" in served.headers["content-security-policy"]
    db = tmp_path / "data" / "demo" / "nanoslack.db"
    names = _shared_names(db)
    assert {"burndown.png", "numbers.csv"} <= set(names), names
    # A pasted file waits in the composer like a picked one; × takes it back, nothing is sent.
    page.locator("#composer textarea").evaluate(
        """(ta) => {
            const dt = new DataTransfer();
            dt.items.add(new File(["pasted"], "clip.txt", { type: "text/plain" }));
            const init = { clipboardData: dt, bubbles: true, cancelable: true };
            ta.dispatchEvent(new ClipboardEvent("paste", init));
        }"""
    )
    expect(page.locator("#composer .attachment .file-chip")).to_contain_text("clip.txt")
    page.locator("#composer .attachment .remove").click()
    expect(page.locator("#composer .attachment")).to_be_hidden()
    page.locator("#thread-timeline").evaluate("box => { box.scrollTop = box.scrollHeight; }")
    _shot(page, "playground-files.png")
    assert demo.interrupt() == 0
