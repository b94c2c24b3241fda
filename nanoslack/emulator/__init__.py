"""nanoslack.emulator: a stateful, wire-compatible Slack workspace on 127.0.0.1 for tests and demos.

The product never imports this package.
"""

from .client import EmulatorClient, EmulatorClientError
from .driver import Emulator, EmulatorError, ThreadedEmulator
from .state import ApiCall, App, Conversation, Stats, User
from .workspace import apply_workspace, load_workspace_file, sample_workspace

__all__ = [
    "ApiCall",
    "App",
    "Conversation",
    "Emulator",
    "EmulatorClient",
    "EmulatorClientError",
    "EmulatorError",
    "Stats",
    "ThreadedEmulator",
    "User",
    "apply_workspace",
    "load_workspace_file",
    "sample_workspace",
]
