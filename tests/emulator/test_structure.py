"""The emulator's shape: each driver method is written once, the sync driver mirrors the async
one, modules import one way."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import nanoslack.emulator as pkg
from nanoslack.emulator import Emulator, Engine, ThreadedEmulator
from nanoslack.emulator.state import Workspace

# Lifecycle differs by nature (awaitable vs blocking, the thread's port is given up front);
# in_thread is the async driver's way to the sync one.
LIFECYCLE = {"start", "stop", "in_thread"}

# Lowest first: a module may import only modules before it.
IMPORT_ORDER = [
    "state",
    "blockkit",
    "surface",
    "files",
    "workspace",
    "events",
    "socket",
    "engine",
    "webapi",
    "server",
    "driver",
    "cli",
]


def _surface(cls: type) -> dict[str, Any]:
    """Public name -> signature (methods) or the getter's return annotation (properties)."""
    out: dict[str, Any] = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or name in LIFECYCLE:
            continue
        if isinstance(member, property):
            assert member.fget is not None
            out[name] = ("property", inspect.signature(member.fget).return_annotation)
        elif callable(member):
            out[name] = ("method", inspect.signature(member))
    return out


def test_threaded_driver_has_the_async_drivers_methods_and_parameters() -> None:
    sync, async_ = _surface(ThreadedEmulator), _surface(Emulator)
    only_sync, only_async = set(sync) - set(async_), set(async_) - set(sync)
    assert not only_sync and not only_async, f"only sync: {only_sync}; only async: {only_async}"
    for name, (kind, sig) in async_.items():
        assert sync[name] == (kind, sig), f"{name}: sync {sync[name]} != async {(kind, sig)}"
    # and they mean it: each async method is awaitable and its sync twin is not
    for name, (kind, _sig) in async_.items():
        if kind == "method":
            assert not inspect.iscoroutinefunction(getattr(ThreadedEmulator, name)), name


def test_each_driver_method_is_the_engines_or_the_states_own() -> None:
    """The one definition of a driver method's parameters is the engine's method of that name
    (the workspace state's for users, apps and conversations); the async driver awaits
    exactly the engine's coroutines."""
    for name, (kind, sig) in _surface(Emulator).items():
        if kind != "method" or name == "wait_for":
            continue
        source = getattr(Engine, name, None) or getattr(Workspace, name)
        assert sig == inspect.signature(source), name
        awaited = inspect.iscoroutinefunction(getattr(Emulator, name))
        assert awaited == inspect.iscoroutinefunction(source), name


def test_no_layer_declares_a_driver_method_again() -> None:
    state = {n for n, v in vars(Workspace).items() if callable(v) and not n.startswith("_")}
    assert not state & set(vars(Engine)), "the engine repeats the workspace state's methods"
    for cls in (Emulator, ThreadedEmulator):
        own = {n for n in vars(cls) if not n.startswith("_")} - LIFECYCLE
        assert not own, f"{cls.__name__} declares {sorted(own)} itself: name them once in Driver"


def test_the_surfaces_include_the_fault_injectors_the_readme_promises() -> None:
    for name in ("inject_envelope", "inject_frame", "zombify_sockets", "click_button", "wait_for"):
        assert name in _surface(ThreadedEmulator)


def _imports(path: Path) -> tuple[set[str], list[str]]:
    """The package modules ``path`` imports at module level, and the imports it makes elsewhere
    (in a function, or under ``if TYPE_CHECKING:``: the ways around an import cycle)."""
    tree = ast.parse(path.read_text())
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            top.update([node.module] if node.module else [a.name for a in node.names])
    nested = [
        f"line {n.lineno}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and n not in tree.body
    ]
    return top, nested


def test_emulator_modules_import_in_one_direction() -> None:
    root = Path(pkg.__file__).parent
    for i, mod in enumerate(IMPORT_ORDER):
        top, nested = _imports(root / f"{mod}.py")
        assert not nested, f"{mod}.py imports inside a function or block: {nested}"
        later = top - set(IMPORT_ORDER[:i])
        assert not later, f"{mod}.py imports {sorted(later)}, which come after it in {IMPORT_ORDER}"
    client_imports, _ = _imports(root / "client.py")
    assert not client_imports, "the HTTP client speaks HTTP only, it imports nothing of the emulator"
    listed = {p.stem for p in root.glob("*.py")} - {"__init__", "__main__", "client"}
    assert listed == set(IMPORT_ORDER), "a new emulator module needs its place in IMPORT_ORDER"
