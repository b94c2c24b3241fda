"""Scrub secrets from text that may reach an exception message or a log line."""

from __future__ import annotations

import re
from collections.abc import Iterable

from nanoslack.logs import redact_text

# OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) key shapes; provider error bodies
# sometimes echo a (partly masked) key back.
_API_KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_-]{6,}")


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return _API_KEY_RE.sub("sk-***", redact_text(text))


def tail(text: str, limit: int = 200, secrets: Iterable[str | None] = ()) -> str:
    """The last ``limit`` characters, scrubbed after cutting so no half-key survives a cut."""
    cleaned = scrub(text, secrets)
    return cleaned[-limit:].strip()
