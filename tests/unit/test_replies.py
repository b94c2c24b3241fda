"""An agent's reply made ready for Slack (``nanoslack.replies``, docs/agents.md)."""

from __future__ import annotations

import random
import re

import pytest

from nanoslack.replies import FENCE, MAX_POSTS, link_mentions, prepare_posts, split_text

SIBLINGS = {"dana": "U0DANA", "eli": "U0ELI", "gh-bot": "U0GHBOT"}


# -- link_mentions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "linked"),
    [
        ("@eli can you build it?", "<@U0ELI> can you build it?"),
        ("over to you, @eli.", "over to you, <@U0ELI>."),
        ("@eli's turn", "<@U0ELI>'s turn"),
        ("(@dana)", "(<@U0DANA>)"),
        ("ask @gh-bot", "ask <@U0GHBOT>"),
        ("@dana and @eli", "<@U0DANA> and <@U0ELI>"),
        ("@Eli, please", "<@U0ELI>, please"),
    ],
)
def test_a_sibling_named_with_at_becomes_a_real_mention(text: str, linked: str) -> None:
    assert link_mentions(text, SIBLINGS) == linked


@pytest.mark.parametrize(
    "text",
    [
        "already linked <@U0ELI> and <@U0ELI|eli>",
        "write to eli@example.com or dana@eli.dev",
        "@elisa is not a sibling, nor is @eli_bot or @fay",
        "see https://medium.com/@eli/a-post",
        "<https://example.com/@dana|profile>",
        "@@eli",
    ],
)
def test_mentions_emails_links_and_unknown_names_are_left_alone(text: str) -> None:
    assert link_mentions(text, SIBLINGS) == text


def test_without_siblings_nothing_changes() -> None:
    assert link_mentions("@eli hi", {}) == "@eli hi"


# -- split_text ----------------------------------------------------------------------------------


def test_a_short_text_is_one_post_unchanged() -> None:
    text = "hello\n\n```\ncode\n"
    assert split_text(text, 100) == [text]


def test_long_text_splits_on_paragraphs_first() -> None:
    paras = [f"paragraph {i} " + "x" * 30 for i in range(6)]
    chunks = split_text("\n\n".join(paras), 100)
    assert len(chunks) > 1
    assert all(len(c) <= 100 for c in chunks)
    # Every chunk is whole paragraphs.
    assert [p for c in chunks for p in c.split("\n\n")] == paras


def test_a_paragraph_too_long_splits_on_lines() -> None:
    lines = [f"line {i} " + "y" * 20 for i in range(10)]
    chunks = split_text("\n".join(lines), 80)
    assert all(len(c) <= 80 for c in chunks)
    assert [line for c in chunks for line in c.split("\n")] == lines


def test_a_line_too_long_is_cut_at_a_space_and_never_inside_a_mention_or_link() -> None:
    words = ["word"] * 30 + ["<@U0ELI>", "<https://example.com/a/long/path|a link>"] + ["word"] * 30
    text = " ".join(words)
    # Every limit that fits the longest token (41 characters).
    for limit in range(41, 90, 3):
        chunks = split_text(text, limit)
        assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
        for chunk in chunks:
            assert len(chunk) <= limit
            assert chunk.count("<") == chunk.count(">"), f"a token was cut at limit {limit}: {chunk!r}"


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})" for i in range(30))
    text = f"Here it is:\n\n```\n{code}\n```\n\nDone."
    chunks = split_text(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.count(FENCE) % 2 == 0, f"unbalanced fence in {chunk!r}"
    inner = [line for c in chunks for line in c.split("\n") if line.startswith("print(")]
    assert inner == code.split("\n")


def test_random_replies_lose_nothing_and_keep_every_token_whole() -> None:
    rnd = random.Random(8)
    atoms = ["word", "w", "<@U0ELI>", "<https://x.io/a|lnk>", "\n", "\n\n", "```", " ", "longword" * 3]
    for _ in range(500):
        text = " ".join(rnd.choice(atoms) for _ in range(rnd.randint(1, 120)))
        limit = rnd.randint(60, 200)  # the longest token fits, with a code block's fences
        chunks = split_text(text, limit)
        assert _visible("".join(chunks)) == _visible(text)
        for chunk in chunks:
            assert len(chunk) <= limit
            assert chunk.count("<") == chunk.count(">")


def test_a_long_reply_is_cut_between_blocks_and_never_inside_a_code_block_that_fits() -> None:
    code = "```python\n" + "\n".join(f"x = {i}" for i in range(400)) + "\n\nprint(x)\n```"
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(200))
    items = "\n".join(f"- item {i}" for i in range(300))
    text = "\n\n".join(["**Report**", items, code, table, "Done."])
    chunks = split_text(text, 4_000)
    assert len(chunks) > 1 and all(len(c) <= 4_000 for c in chunks)
    assert code in chunks[1] or any(code in c for c in chunks), "the code block was cut"
    assert any(table in c for c in chunks), "the table was cut"
    assert "\n\n".join(chunks) == text


def test_a_code_block_longer_than_a_post_is_cut_on_lines_each_piece_fenced() -> None:
    code = "```sql\n" + "\n".join(f"select {i};" for i in range(300)) + "\n```"
    chunks = split_text(code, 1_000)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 1_000
        assert chunk.startswith("```sql\n") and chunk.endswith("\n```")
    inner = [line for c in chunks for line in c.split("\n") if line.startswith("select")]
    assert inner == [f"select {i};" for i in range(300)]


def test_a_name_inside_code_is_not_made_a_mention() -> None:
    text = "@eli look:\n\n```\nssh @eli\n```\n\nand `@dana` stays; @dana too"
    assert link_mentions(text, SIBLINGS) == (
        "<@U0ELI> look:\n\n```\nssh @eli\n```\n\nand `@dana` stays; <@U0DANA> too"
    )


def _visible(text: str) -> str:
    return re.sub(r"\s", "", text.replace(FENCE, ""))


def test_nothing_but_blank_pieces_comes_out() -> None:
    chunks = split_text("a" * 50 + "\n\n\n\n\n\n" + "b" * 50, 60)
    assert chunks == ["a" * 50, "b" * 50]


# -- prepare_posts -------------------------------------------------------------------------------


def test_at_most_three_posts_are_kept_in_order() -> None:
    assert MAX_POSTS == 3
    assert prepare_posts([f"post {i}" for i in range(1, 6)], SIBLINGS) == ["post 1", "post 2", "post 3"]


def test_empty_posts_do_not_count_toward_the_cap() -> None:
    assert prepare_posts(["", "  ", "one", "\n", "two"], {}) == ["one", "two"]


def test_posts_are_linked_stripped_and_split() -> None:
    posts = prepare_posts(["  @eli take this  ", "z " * 60], SIBLINGS, max_chars=50)
    assert posts[0] == "<@U0ELI> take this"
    assert len(posts) > 2 and all(len(p) <= 50 for p in posts[1:])
    assert re.sub(r"\s", "", "".join(posts[1:])) == "z" * 60


def test_silence_is_no_post() -> None:
    assert prepare_posts([], SIBLINGS) == []
