"""What a model call costs in US dollars (docs/agents.md "Cost in dollars"), from the price
table ``genai-prices`` ships (read from the installed package, never fetched at run time).

A call is priced by the model the provider says answered, else by the configured one, at
the provider its URL names (an OpenAI-compatible server elsewhere: by the model alone). A
model the table does not know costs nothing in dollars (its tokens still count) and is
said once per process: ``model not priced``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import genai_prices
from genai_prices.types import AbstractUsage

from nanoslack.logs import get_logger

log = get_logger(__name__)

NOT_PRICED = "model not priced"

_said: set[str] = set()
_said_lock = threading.Lock()
# (model, url) pairs the table has no price for: not looked up again.
_unknown: set[tuple[str, str | None]] = set()


def cost_usd(
    usage: AbstractUsage, models: Iterable[str | None], *, url: str | None, instance: str
) -> float | None:
    """The call's price in US dollars; None when no name in ``models`` is in the table."""
    names = [name for name in dict.fromkeys(models) if name]
    for name in names:
        price = _price(usage, name, url)
        if price is not None:
            return price
    if names:
        _say_once(names[-1], instance)
    return None


def _price(usage: AbstractUsage, model: str, url: str | None) -> float | None:
    for where in (url, None) if url else (None,):
        if (model, where) in _unknown:
            continue
        try:
            found = genai_prices.calc_price(usage, model, provider_api_url=where)
        except LookupError:
            _unknown.add((model, where))
            continue
        return float(found.total_price)
    return None


def _say_once(model: str, instance: str) -> None:
    with _said_lock:
        if model in _said:
            return
        _said.add(model)
    log.warning(NOT_PRICED, model=model, instance=instance, counts="tokens only")
