"""Fixtures for the agent tests: a real teammate folder, a sleep that only records, the
fleet's shared HTTP client and a model server on 127.0.0.1 (``nanoslack.testing.llm_server``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from nanoslack.agents import make_http_client
from nanoslack.testing.llm_server import LLMServer


class Sleeps:
    """Stands in for ``asyncio.sleep`` in the retry loop: records waits, waits for nothing."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with make_http_client() as client:
        yield client


@pytest.fixture
async def llm() -> AsyncIterator[LLMServer]:
    async with LLMServer() as server:
        yield server


@pytest.fixture
def teammates(tmp_path: Path) -> Path:
    root = tmp_path / "teammates"
    (root / "dana").mkdir(parents=True)
    (root / "dana" / "SOUL.md").write_text("---\nrole: planner\n---\nYou are Dana, the planner.\n")
    (root / "dana" / "AGENTS.md").write_text("Hand work over with @name.\n")
    (root / "_skills").mkdir()
    (root / "_skills" / "review.md").write_text("# Review: look for failure paths\n")
    return root
