"""``script`` back end: deterministic replies from a rules file (the demo, tests).

The rules file is JSON::

    {
      "crew": ["dana", "eli", "fay"],
      "rules": [
        {"match": "@{name}\\\\b", "from": "human",
         "reply": ["On it, {sender}.", "@{next}, can you draft it?"]},
        {"match": "@{name}\\\\b", "from": "bot",
         "reply": "Thanks {sender}.", "when_wrapping_up": null}
      ],
      "default": null
    }

- The rules look at the **last line** of the transcript (the newest message). The
  first rule whose ``match`` (a regular expression, ``re.search``, case-insensitive;
  default: matches anything) is found in its text and whose ``from`` (``human``,
  ``bot`` or ``any``, default ``any``) fits its sender answers.
- ``reply``: one post (a string) or several (a list); ``null`` or ``[]`` is silence.
- ``calls`` (optional): tool calls made, in order, before the reply is posted, as a
  model would make them: ``[{"tool": "read_skill", "arguments": {"name": "handoff"}},
  {"tool": "send_to_agent", "arguments": {"to": "{next}", "message": "Please sketch
  {text}"}}]`` (placeholders are filled in string arguments). Each call is a step of the
  turn and a handoff is delivered like a model's.
- ``from`` also takes ``agent``: a message another instance handed over with
  ``send_to_agent`` (``bot`` is a bot's message in Slack, ``any`` is every kind).
- ``note`` (optional): a regular expression that must also be found in one of the
  turn's notes (the lines about the room shown after the transcript, e.g. a round's
  "Everyone in this room answers this question at once"): a rule for round rooms only.
- ``when_wrapping_up`` (optional): the reply used instead when the turn carries the
  wrapping-up cue (``null``/``[]`` = stay silent). Without it the rule answers as usual.
- ``think`` (optional): seconds the rule takes before its calls and reply, as a slow
  model would (the demo shows the status line meanwhile); default 0.
- ``default``: the reply when no rule matches (``null`` = silence, the default).
- Placeholders in ``reply``/``when_wrapping_up``/``default``: ``{sender}`` (the last
  line's sender name), ``{name}`` (my display name), ``{next}`` (the teammate after
  me, see below), ``{text}`` (the last line's text), and each named group of the
  rule's ``match`` (``(?P<what>…)`` → ``{what}``; "" when the group took no part): e.g.
  ``"match": "remember(?: that)? (?P<what>.+)"`` with ``"arguments": {"text": "{what}"}``.
  A group may not take one of the four names above. In ``match``, ``{name}`` stands for
  my name, regex-escaped. Other braces are left as they are.
- ``{next}``: the next name after mine in ``crew`` (cycling, skipping me and, when
  the room's members are known, names not in the room); without ``crew``, the next
  name after mine in the room's member list. A crew hands off round-robin this way.

The file is re-read when it changes, so a demo can be edited while the fleet runs.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanoslack.agents.types import Line, Reply, Tools, Turn, TurnFailed
from nanoslack.logs import get_logger

log = get_logger("nanoslack.agents")

SENDER_KINDS = ("human", "bot", "agent", "any")
BUILTINS = ("sender", "name", "next", "text")
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

Posts = tuple[str, ...]


class RulesError(ValueError):
    """The rules file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Rule:
    match: str
    sender: str
    reply: Posts
    wrapping_up: Posts | None  # None: no special wrap-up answer
    calls: tuple[Call, ...] = ()
    note: str | None = None
    think: float = 0.0

    def fits(self, line: Line, name: str, notes: tuple[str, ...] = ()) -> bool:
        return self.found(line, name, notes) is not None

    def found(self, line: Line, name: str, notes: tuple[str, ...] = ()) -> re.Match[str] | None:
        """The match in the line's text (its named groups fill placeholders), or None."""
        kind = "agent" if line.handoff else "bot" if line.from_bot else "human"
        if self.sender not in ("any", kind):
            return None
        if self.note is not None and not any(re.search(self.note, n, re.IGNORECASE) for n in notes):
            return None
        pattern = self.match.replace("{name}", re.escape(name))
        return re.search(pattern, line.text, re.IGNORECASE)


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...]
    default: Posts
    crew: tuple[str, ...]


def _posts(value: Any, where: str) -> Posts:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RulesError(f"{where}: expected a string, a list of strings or null")


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: expected an object")
    match = raw.get("match", "")
    sender = raw.get("from", "any")
    if not isinstance(match, str):
        raise RulesError(f"{where}.match: expected a regular expression string")
    try:
        groups = re.compile(match.replace("{name}", "x")).groupindex
    except re.error as exc:
        raise RulesError(f"{where}.match: not a valid regular expression ({exc})") from exc
    taken = sorted(set(groups) & set(BUILTINS))
    if taken:
        raise RulesError(f"{where}.match: group name {taken[0]!r} is a placeholder already")
    if sender not in SENDER_KINDS:
        raise RulesError(f"{where}.from: expected one of {', '.join(SENDER_KINDS)}")
    wrapping = (
        _posts(raw["when_wrapping_up"], f"{where}.when_wrapping_up") if "when_wrapping_up" in raw else None
    )
    calls = _calls(raw.get("calls"), f"{where}.calls")
    note = raw.get("note")
    if note is not None:
        if not isinstance(note, str):
            raise RulesError(f"{where}.note: expected a regular expression string")
        try:
            re.compile(note)
        except re.error as exc:
            raise RulesError(f"{where}.note: not a valid regular expression ({exc})") from exc
    think = raw.get("think", 0)
    if not isinstance(think, int | float) or isinstance(think, bool) or not 0 <= think <= 60:
        raise RulesError(f"{where}.think: expected seconds between 0 and 60")
    reply = _posts(raw.get("reply"), f"{where}.reply")
    return Rule(match, sender, reply, wrapping, calls, note, float(think))


def _calls(value: Any, where: str) -> tuple[Call, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RulesError(f'{where}: expected a list of {{"tool": …, "arguments": {{…}}}}')
    calls = []
    for i, raw in enumerate(value):
        tool = raw.get("tool") if isinstance(raw, dict) else None
        arguments = raw.get("arguments", {}) if isinstance(raw, dict) else None
        if not isinstance(tool, str) or not tool or not isinstance(arguments, dict):
            raise RulesError(f'{where}[{i}]: expected {{"tool": "name", "arguments": {{…}}}}')
        calls.append(Call(tool, arguments))
    return tuple(calls)


def parse_rules(data: Any, source: str = "rules") -> Rules:
    if not isinstance(data, dict):
        raise RulesError(f"{source}: expected a JSON object with a 'rules' list")
    raw_rules = data.get("rules", [])
    if not isinstance(raw_rules, list):
        raise RulesError(f"{source}: 'rules' must be a list")
    crew = data.get("crew", [])
    if not isinstance(crew, list) or not all(isinstance(c, str) for c in crew):
        raise RulesError(f"{source}: 'crew' must be a list of names")
    rules = tuple(_rule(r, f"{source}: rules[{i}]") for i, r in enumerate(raw_rules))
    return Rules(rules, _posts(data.get("default"), f"{source}: default"), tuple(crew))


def load_rules(path: Path) -> Rules:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RulesError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise RulesError(f"{path}: not valid JSON ({exc})") from exc
    return parse_rules(data, str(path))


def next_teammate(turn: Turn, crew: tuple[str, ...]) -> str:
    me = {turn.name, turn.instance}
    ring = list(crew or turn.members)
    if crew and turn.members:
        ring = [n for n in ring if n in turn.members or n in me]
    mine = next((i for i, n in enumerate(ring) if n in me), -1)
    for step in range(1, len(ring) + 1):
        candidate = ring[(mine + step) % len(ring)]
        if candidate not in me:
            return candidate
    return ""


Groups = dict[str, str]


def choose(rules: Rules, turn: Turn) -> tuple[Posts, tuple[Call, ...], Groups]:
    """The raw (unfilled) posts and tool calls the rules give for this turn, and the
    named groups of the rule's match."""
    rule, groups = chosen(rules, turn)
    if rule is None:
        return rules.default, (), {}
    if turn.wrapping_up and rule.wrapping_up is not None:
        return rule.wrapping_up, (), groups
    return rule.reply, rule.calls, groups


def chosen(rules: Rules, turn: Turn) -> tuple[Rule | None, Groups]:
    """The rule that answers this turn (None: the default) and its match's named groups."""
    if not turn.transcript:
        return None, {}
    last = turn.transcript[-1]
    for rule in rules.rules:
        found = rule.found(last, turn.name, turn.notes)
        if found is not None:
            return rule, {k: (v or "").strip() for k, v in found.groupdict().items()}
    return None, {}


def fill(template: str, turn: Turn, crew: tuple[str, ...], groups: Groups | None = None) -> str:
    last = turn.transcript[-1] if turn.transcript else None
    values = {
        **(groups or {}),
        "sender": last.sender_name if last else "",
        "name": turn.name,
        "next": next_teammate(turn, crew),
        "text": last.text if last else "",
    }
    return _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), template)


class ScriptAgent:
    name = "script"
    # Rules answer the newest message alone: a thread's history would be read and kept
    # for nothing (docs/memory.md).
    remembers = False

    def __init__(self, rules_path: Path | str, *, instance: str) -> None:
        self.rules_path = Path(rules_path)
        self.instance = instance
        self._stamp: tuple[int, int] | None = None
        self._rules = self._load()  # raises RulesError: the caller reports it at start

    def __repr__(self) -> str:
        return f"<ScriptAgent instance={self.instance} rules={self.rules_path}>"

    def _load(self) -> Rules:
        stat = self.rules_path.stat() if self.rules_path.exists() else None
        rules = load_rules(self.rules_path)
        self._stamp = (stat.st_mtime_ns, stat.st_size) if stat else None
        return rules

    def _current(self) -> Rules:
        try:
            stat = self.rules_path.stat()
        except OSError:
            return self._rules  # the file went away mid-run: keep answering as before
        if (stat.st_mtime_ns, stat.st_size) != self._stamp:
            try:
                self._rules = self._load()
            except RulesError as exc:
                raise TurnFailed(str(exc)) from exc
            log.info("script rules reloaded", instance=self.instance, path=str(self.rules_path))
        return self._rules

    async def run(self, turn: Turn, tools: Tools) -> Reply:
        rules = self._current()
        templates, calls, groups = choose(rules, turn)
        rule, _ = chosen(rules, turn)
        if rule is not None and rule.think:
            await asyncio.sleep(rule.think)
        for call in calls:
            arguments = {
                k: fill(v, turn, rules.crew, groups) if isinstance(v, str) else v
                for k, v in call.arguments.items()
            }
            await tools.call(call.tool, arguments)
        posts = (fill(t, turn, rules.crew, groups).strip() for t in templates)
        return Reply(tuple(p for p in posts if p))
