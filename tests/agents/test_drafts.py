"""Following a post's text while the model writes its ``send_message`` arguments
(``nanoslack.agents.drafts``): every prefix of the arguments gives a prefix of the text."""

from __future__ import annotations

import json

import pytest

from nanoslack.agents.drafts import StringFieldReader, partial_string_field

TEXTS = [
    'plain words, "quoted", a back\\slash and a tab\t',
    "lines\nand more lines\r\n",
    "accents é and emoji 🎉 and a CJK 漢字",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("ascii_only", [True, False])
def test_every_prefix_of_the_arguments_gives_a_prefix_of_the_text(text: str, ascii_only: bool) -> None:
    source = json.dumps({"text": text}, ensure_ascii=ascii_only)
    seen = [partial_string_field(source[:n], "text") for n in range(len(source) + 1)]
    grown = [s for s in seen if s is not None]
    assert grown[-1] == text
    assert all(text.startswith(s) for s in grown)
    assert all(len(a) <= len(b) for a, b in zip(grown, grown[1:], strict=False))


def test_the_reader_fed_piece_by_piece_ends_with_the_whole_text() -> None:
    text = "Here is the plan:\n" + "\n".join(f'{i}. step "{i}" 🎉' for i in range(200))
    source = json.dumps({"channel": "here", "text": text, "extra": {"text": "no"}})
    reader = StringFieldReader("text")
    out = None
    for at in range(0, len(source), 7):
        out = reader.feed(source[at : at + 7])
    assert out == text


def test_a_text_key_inside_another_value_is_not_the_posts_text() -> None:
    assert partial_string_field('{"meta": {"text": "not this"}, "te', "text") is None
    assert partial_string_field('{"meta": {"text": "not this"}, "text": "this', "text") == "this"
