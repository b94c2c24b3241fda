"""nanoslack uses slack-sdk, slack-bolt and aiohttp through their public APIs only: a
patch release may rename anything private without a word, and the fleet would break
in production instead of here.

In every module of ``nanoslack/`` that imports one of them, the check refuses: a
private module of theirs (a ``_`` component, bolt's ``async_internals``), an attribute
``x._name`` on anything but ``self``/``cls`` (``super()._name`` included), and
``getattr``/``setattr``/``hasattr``/``delattr`` with a ``_`` name or any ``setattr`` on
an object (a replaced method). Defining a hook a library documents for overriding
(``def _can_retry_async`` in a retry handler) is not an access and passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nanoslack

LIBRARIES = ("slack_sdk", "slack_bolt", "aiohttp")
REFLECTION = ("getattr", "setattr", "hasattr", "delattr")
ROOT = Path(nanoslack.__file__).parent


def _imported(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] in LIBRARIES]


def private_access(source: str) -> list[str]:
    """What in ``source`` reaches past the libraries' public APIs (none if it imports none)."""
    tree = ast.parse(source)
    modules = _imported(tree)
    if not modules:
        return []
    found = [
        f"import {m}" for m in modules if any(p.startswith("_") for p in m.split(".")) or "internals" in m
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION:
            name = node.args[1] if len(node.args) > 1 else None
            literal = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else ""
            if node.func.id == "setattr" or literal.startswith("_"):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_of_nanoslack_reaches_into_the_libraries_private_parts() -> None:
    offences = {
        str(path.relative_to(ROOT.parent)): found
        for path in sorted(ROOT.rglob("*.py"))
        if (found := private_access(path.read_text(encoding="utf-8")))
    }
    assert offences == {}


def test_the_check_catches_each_kind_of_private_access() -> None:
    header = "import aiohttp\n"
    caught = [
        "from aiohttp._websocket.helpers import websocket_mask\n",
        "from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app\n",
        header + "w = client.current_session._writer\n",
        header + "m = getattr(app, '_async_middleware_list', [])\n",
        header + "setattr(client, 'process_message', handler)\n",
        header + "class Q:\n    def f(self):\n        return super()._init(1)\n",
    ]
    for source in caught:
        assert private_access(source), source
    passes = [
        header + "class H:\n    async def _can_retry_async(self):\n        return self._limit\n",
        "x = thing._private\n",  # imports none of the libraries: not this check's business
    ]
    for source in passes:
        assert not private_access(source), source
