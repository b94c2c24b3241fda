"""The one tool shape (docs/agents.md): a name, a description, a pydantic model of its
arguments and an async function.

The model is the one source of the JSON schema the agent is shown (pydantic-ai's
toolsets, the MCP endpoint of ``command`` agents) and of the check its arguments pass
before the function runs: a call whose arguments do not fit is refused with the reason
(``fit``), so a function gets its model, never a raw dict to re-parse. A tool whose
arguments are someone else's to check (a teammate's MCP server's) carries that schema in
``parameters`` and takes any object (``AnyArguments``).

A tool family (host, team, notes, routines, MCP) is a list of tools: a turn's toolbox
offers the lists it is given, so a feature offers tools by handing over a list.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from nanoslack.replies import MAX_POSTS

A = TypeVar("A", bound=BaseModel)
# A refusal's list of what did not fit is cut after this many problems.
MAX_PROBLEMS = 5


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gives back to the model: always text; ``is_error`` when the call
    was refused or failed (the text says why, so the model can tell the human plainly)."""

    text: str
    is_error: bool = False


class Arguments(BaseModel):
    """Base of every tool's arguments: unknown keys are ignored (a model may add some)."""

    model_config = ConfigDict(extra="ignore")


class AnyArguments(BaseModel):
    """Any JSON object: the arguments of a tool whose server checks them itself."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Tool(Generic[A]):
    name: str
    description: str
    arguments: type[A]
    run: Callable[[A], Awaitable[ToolResult]]
    # "host" for the fleet's own tools (served to command agents over MCP too), else
    # "mcp:<server>" for a teammate's MCP server's tool (named "<server>_<tool>").
    origin: str = "host"
    # The JSON schema when the arguments are someone else's to check (an MCP server's).
    parameters: Mapping[str, Any] | None = None
    # Waits for an owner's Allow before it runs (docs/agents.md).
    approval: bool = False
    # False: not shown to the agent, but a call is answered (with why it cannot be made
    # here), not with "unknown tool".
    offered: bool = True

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, a fresh copy (a request may change its own)."""
        schema = _schema(self.arguments) if self.parameters is None else self.parameters
        # A JSON round trip: a schema is JSON, and orjson copies it ~10x faster than deepcopy.
        copied: dict[str, Any] = orjson.loads(orjson.dumps(dict(schema)))
        return copied

    @property
    def validator(self) -> Any:
        """The pydantic-core validator of the arguments (pydantic-ai's ``args_validator``)."""
        return _adapter(self.arguments).validator

    def fit(self, raw: object) -> A | str:
        """The arguments as the model, or why they do not fit it (the text the agent reads)."""
        if isinstance(raw, self.arguments):
            return raw
        if not isinstance(raw, Mapping):
            return f"not done: the arguments of {self.name} must be a JSON object"
        try:
            return self.arguments.model_validate(dict(raw))
        except ValidationError as exc:
            return refusal(self.name, exc)

    async def call(self, raw: object) -> ToolResult:
        """Check the arguments, then run."""
        fitted = self.fit(raw)
        if isinstance(fitted, str):
            return ToolResult(fitted, is_error=True)
        return await self.run(fitted)


def refusal(name: str, error: ValidationError) -> str:
    """``not done: the arguments do not fit send_message: text: Field required``."""
    problems = []
    for problem in error.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]:
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        problems.append(f"{where}: {problem['msg']}")
    more = error.error_count() - len(problems)
    if more > 0:
        problems.append(f"and {more} more")
    return f"not done: the arguments do not fit {name}: {'; '.join(problems)}"


def dumped(arguments: object) -> dict[str, Any]:
    """The arguments as a plain object (for the step's record, an owner's ask, an MCP server)."""
    if isinstance(arguments, AnyArguments):
        return dict(arguments.model_extra or {})
    if isinstance(arguments, BaseModel):
        return arguments.model_dump(exclude_unset=True)
    return dict(arguments) if isinstance(arguments, Mapping) else {}


def find(tools: Sequence[Tool[Any]], name: str) -> Tool[Any] | None:
    return next((tool for tool in tools if tool.name == name), None)


async def call_tool(tools: Sequence[Tool[Any]], name: str, raw: object) -> ToolResult:
    """Call one of ``tools`` by name (``unknown tool`` when none has it)."""
    tool = find(tools, name)
    if tool is None:
        return ToolResult(f"unknown tool {name!r}", is_error=True)
    return await tool.call(raw)


@functools.cache
def _adapter(model: type[BaseModel]) -> TypeAdapter[Any]:
    return TypeAdapter(model)


@functools.cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    # Titles are pydantic's, not ours: the model reads the descriptions.
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


# -- the two host tools every back end offers (``nanoslack.tools.host`` and ``LocalTools``) --

SEND_MESSAGE = "send_message"
READ_SKILL = "read_skill"
SEND_MESSAGE_DESCRIPTION = (
    "Post one message to the Slack conversation you are in (in the thread you were woken in). "
    f"Call it once per message you want people to see (at most {MAX_POSTS}). Not calling it means you "
    "stay silent, which is fine when you have nothing useful to add. Mention a teammate as @name."
)
READ_SKILL_DESCRIPTION = (
    "Read one of the shared skills listed in your instructions, by name. Returns its full text."
)


class SendMessage(Arguments):
    text: str = Field(description="The message text (Slack mrkdwn).")


class ReadSkill(Arguments):
    name: str = Field(description="The skill's name, e.g. handoff.")
