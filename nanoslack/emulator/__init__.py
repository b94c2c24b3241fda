"""nanoslack.emulator: a stateful, wire-compatible Slack workspace on 127.0.0.1 for tests and demos.

The product never imports this package. Modules import in one direction:
state → events → socket → engine → webapi → server → driver → cli (workspace needs only
state; client needs nothing of the package).
"""

from .client import EmulatorClient, EmulatorClientError
from .driver import Emulator, ThreadedEmulator
from .engine import Engine
from .state import ApiCall, App, Conversation, EmulatorError, Stats, User
from .workspace import apply_workspace, load_workspace_file, sample_workspace

__all__ = [
    "ApiCall",
    "App",
    "Conversation",
    "Emulator",
    "EmulatorClient",
    "EmulatorClientError",
    "EmulatorError",
    "Engine",
    "Stats",
    "ThreadedEmulator",
    "User",
    "apply_workspace",
    "load_workspace_file",
    "sample_workspace",
]
