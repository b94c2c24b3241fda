"""The turn stage (docs/agents.md): wake the instance's agent and record its reply.

Three jobs, one module each, in the order a turn meets them: ``scheduler`` (when a
turn runs: one per thread, under a fleet-wide cap, never in a halted or spent room),
``transcript`` (what the agent is shown) and ``record`` (how the turn's outcome is
written, in one transaction). ``nanoslack.core`` builds them for each instance.
"""

from nanoslack.turns.record import BUDGET_TEXT, TurnRecorder
from nanoslack.turns.scheduler import TurnScheduler
from nanoslack.turns.transcript import RoomDirectory, Transcripts

__all__ = [
    "BUDGET_TEXT",
    "RoomDirectory",
    "TurnRecorder",
    "TurnScheduler",
    "Transcripts",
]
