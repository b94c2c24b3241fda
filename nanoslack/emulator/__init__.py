"""nanoslack.emulator: a stateful, wire-compatible Slack workspace on 127.0.0.1 for tests and demos.

The product never imports this package. Modules import in one direction:
state → surface → workspace → events → socket → engine → webapi → server → driver → cli (workspace,
the JSON files, and client, the HTTP driver's client, need nothing of the package).
"""

from .client import EmulatorClient, EmulatorClientError
from .driver import Driver, Emulator, ThreadedEmulator, apply_workspace
from .engine import Engine, Options
from .state import ApiCall, App, Conversation, EmulatorError, Stats, User
from .workspace import load_workspace_file, sample_workspace

__all__ = [
    "ApiCall",
    "App",
    "Conversation",
    "Driver",
    "Emulator",
    "EmulatorClient",
    "EmulatorClientError",
    "EmulatorError",
    "Engine",
    "Options",
    "Stats",
    "ThreadedEmulator",
    "User",
    "apply_workspace",
    "load_workspace_file",
    "sample_workspace",
]
