"""The one seam for room features (docs/architecture.md, "Room features").

A room feature is something rooms can do beyond a turn's plain reply: rounds
(``nanoslack.rounds``), the team's board and votes (``nanoslack.team``), memory notes
(``MemoryFeature``), routines (``nanoslack.routines.feature``). Each says, through ``RoomFeature``,
whether a message engages the instance in its rooms, what happens once the gate lets a
message in, the hop limit's pause notice in its rooms, turns of its own (``TurnSource``),
what it adds to a turn's prompt, which tools it offers, what it does when a turn's
effects are committed and when a turn is recorded, its timers, and the clicks it takes.
``nanoslack.core.build_instance`` registers them in one list (a feature of its own
joins it through ``Services.extra_features``): the router, the pipeline, room control,
the turn scheduler, the transcripts, the recorder, the toolbox and the click router ask
every feature in that list, in its order, and know no feature by name
(docs/architecture.md, "Room features", has the table of hooks and who asks each).

Every hook has a default that does nothing, so a feature says only what it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nanoslack.agents import Turn, TurnOrigin
    from nanoslack.inbound import FeatureClick, Inbound, ThreadKey
    from nanoslack.store import MessageRow, RoomRow
    from nanoslack.tools.host import TurnEffects
    from nanoslack.tools.memory import Notes
    from nanoslack.tools.toolbox import ToolFamily


class Clock(Protocol):
    """A loop that runs with the instance while it runs (the team's, the routines')."""

    async def run(self) -> None: ...


class SourcedTurn(Protocol):
    """One turn a source has ready that no message woke (a routine's claimed due time).

    The scheduler runs it as it runs any turn (the agent, the turn's toolbox, the recorder),
    from what it says here: its prompt is one line from the fleet, its posts are joined into
    one that starts a thread of its own in ``room`` (or goes to each owner's DM), and its
    end is told back (``ended``) inside the turn's transaction."""

    @property
    def origin(self) -> TurnOrigin: ...

    @property
    def room(self) -> str:
        """The conversation its posts go to; "" for the owners' DMs. A halt there cancels it."""
        ...

    @property
    def max_steps(self) -> int | None: ...

    def tokens_left(self) -> int | None:
        """Its own token budget left today (None: no cap of its own)."""
        ...

    async def prepare(self) -> str | None:
        """Just before the turn, with its slot: the prompt's text; None when it ended there
        (a gate that skipped it)."""
        ...

    def put_back(self) -> None:
        """A person's turn came first: it waits at the head of its source."""
        ...

    def started(self, turn_id: int) -> None: ...

    def ended(self, status: str, reason: str = "", tokens: int = 0, turn_id: int | None = None) -> None:
        """How it ended: done, silent, failed, skipped (inside the turn's transaction when
        it had one)."""
        ...


class TurnSource(Protocol):
    """Turns with a clock of their own (a feature's ``clocks`` fills it): the scheduler takes
    one when no turn of a person or a handoff waits, one at a time."""

    def take(self) -> SourcedTurn | None: ...


@dataclass(frozen=True, slots=True)
class Engagement:
    """A feature's answer to whether a message in its room engages the instance."""

    engaged: bool
    reason: str  # what the router logs and the inbox keeps, e.g. "mention"
    # For the instance without naming it (a person's question to a whole room): it gets a
    # messaging group, as a mention would, so the gate can judge it.
    addressed: bool = False


class RoomFeature(Protocol):
    # -- a message, inside the pipeline's transaction ------------------------------------------

    def engagement(self, msg: Inbound, room: RoomRow, *, bot_user_id: str) -> Engagement | None:
        """Whether a person's or a bot's message in ``room`` (never a DM) engages the
        instance, when this feature decides that room; None leaves it to the messaging
        group's engage mode. The router asks the features in order: the first answer counts."""
        return None

    def allowed(self, msg: Inbound, room: RoomRow | None, reason: str) -> None:
        """The gate let ``msg`` through to the instance (``reason``: why it engaged);
        ``room`` is None in a DM."""
        return None

    def pause_notice(self, room: RoomRow, text: str) -> str | None:
        """The notice room control posts when bots reach the hop limit in ``room``: ``text``
        as it is, another text, or None for no notice. Each feature gets the previous one's."""
        return text

    # -- a turn ------------------------------------------------------------------------------

    def notes(self, instance: str, key: ThreadKey, msgs: Sequence[MessageRow]) -> Sequence[str]:
        """Lines the turn's prompt shows (``Transcripts``)."""
        return ()

    def toolsets(self) -> Sequence[ToolFamily]:
        """The tools it offers each turn (``Toolboxes``: each family gives a turn its tools)."""
        return ()

    def apply(self, turn_id: int, turn: Turn, effects: TurnEffects) -> None:
        """Inside the turn's transaction: what its tools meant to do (``TurnRecorder``)."""
        return None

    def turn_recorded(self, instance: str, msgs: Sequence[MessageRow], turn_id: int, status: str) -> None:
        """Inside the turn's transaction, once the turn's outcome is recorded."""
        return None

    def held(self) -> frozenset[tuple[str, str]]:
        """(room, ts) of pending messages no turn may answer yet."""
        return frozenset()

    # -- its timers --------------------------------------------------------------------------

    def turn_sources(self) -> Sequence[TurnSource]:
        """Turns no message wakes that the instance's scheduler runs (a routine's runs)."""
        return ()

    def tick(self) -> Sequence[str]:
        """On every poll of the instance's turns: the instances to wake."""
        return ()

    def clocks(self) -> Mapping[str, Clock]:
        """Loops of its own that run with the instance, by task name."""
        return {}

    # -- what people and owners do -----------------------------------------------------------

    def click(self, click: FeatureClick) -> bool:
        """A person's click on one of its buttons: True when it took it."""
        return False

    def halted(self, room: str) -> None:
        """An owner halted ``room`` (inside room control's transaction)."""
        return None


class MemoryFeature(RoomFeature):
    """Memory notes (docs/memory.md): the note tools, and what they did, with the turn."""

    def __init__(self, notes: Notes) -> None:
        self._notes = notes

    def toolsets(self) -> Sequence[ToolFamily]:
        return (self._notes.tools,)

    def apply(self, turn_id: int, turn: Turn, effects: TurnEffects) -> None:
        self._notes.apply(turn_id, turn, effects)
