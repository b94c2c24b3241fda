"""Slack's agent surface in the emulator: the status line, streamed messages, the assistant pane.

- A status (``assistant.threads.setStatus``) belongs to one thread of a conversation; Slack
  shows it until the app posts in that thread, an empty status clears it, or
  ``status_timeout`` seconds pass (Slack: 2 minutes) without it being sent again.
- A stream (``chat.startStream``) is one message that grows in place with each
  ``chat.appendStream`` until ``chat.stopStream`` (or an edit) ends it; its text is at
  most ``STREAM_TEXT_LIMIT`` characters a call. ``task_update`` chunks are kept per
  message, by task id, in the order they first came.
- The pane: suggested prompts and a title per thread.
- Agent sessions (``agents.sessions.setStatus``/``rename``): one per thread, made by its first
  status; a status of ``SESSION_STATUSES``; a title given on creation (later ones ignored,
  ``rename`` changes it). Slack shows a Stop button while a session is ``processing``; a click
  sends ``agent_session_stopped`` and stops the app's streams in the thread, but leaves the
  status for the app to move.
- The Home tab: one published view per app and user (``views.publish``).

Pure state plus the rules above; the engine posts, the Web API checks arguments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .state import EmulatorError

JSON = dict[str, Any]

STATUS_TIMEOUT_S = 120.0
STREAM_TEXT_LIMIT = 12_000
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
MAX_SUGGESTED_PROMPTS = 4
SESSION_STATUSES = ("processing", "active", "suspended", "closed")
SESSION_TITLE_LIMIT = 200
VIEW_SIZE_LIMIT = 250_000  # Slack: a view over 250 kB is ``view_too_large``
# The scope Slack's Agents & AI Apps feature adds (manifest ``features.assistant_view``).
ASSISTANT_SCOPE = "assistant:write"


@dataclass
class StatusLine:
    text: str
    loading_messages: list[str]
    set_at: float  # monotonic


@dataclass
class Stream:
    app_id: str
    recipient_user_id: str
    recipient_team_id: str
    task_display_mode: str
    tasks: dict[str, JSON] = field(default_factory=dict)


@dataclass
class Session:
    app_id: str
    status: str
    title: str
    initiator: str | None
    statuses: list[str] = field(default_factory=list)  # every status set, oldest first


@dataclass
class SurfaceState:
    status_timeout: float = STATUS_TIMEOUT_S
    statuses: dict[tuple[str, str], StatusLine] = field(default_factory=dict)
    # Every status sent, oldest first: (channel, thread_ts, status).
    status_log: list[tuple[str, str, str]] = field(default_factory=list)
    streams: dict[tuple[str, str], Stream] = field(default_factory=dict)
    # A stopped stream's task cards stay with its message.
    tasks: dict[tuple[str, str], dict[str, JSON]] = field(default_factory=dict)
    prompts: dict[tuple[str, str], JSON] = field(default_factory=dict)
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    # Assistant threads opened by a user: (channel, thread_ts) → the context shown.
    threads: dict[tuple[str, str], JSON] = field(default_factory=dict)
    # Agent sessions by (channel, thread_ts).
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    # Home tabs: (app_id, user_id) -> the published view.
    home_views: dict[tuple[str, str], JSON] = field(default_factory=dict)

    def set_status(self, channel: str, thread_ts: str, text: str, loading: list[str] | None) -> None:
        self.status_log.append((channel, thread_ts, text))
        if text:
            self.statuses[(channel, thread_ts)] = StatusLine(text, list(loading or []), time.monotonic())
        else:
            self.statuses.pop((channel, thread_ts), None)

    def status(self, channel: str, thread_ts: str) -> str:
        """What Slack shows now under the thread ("" for nothing)."""
        line = self.statuses.get((channel, thread_ts))
        if line is None:
            return ""
        if time.monotonic() - line.set_at >= self.status_timeout:
            del self.statuses[(channel, thread_ts)]
            return ""
        return line.text

    def posted(self, channel: str, thread_ts: str | None, ts: str) -> None:
        """The app posted: the status of that thread is gone (a top-level post names its own)."""
        self.statuses.pop((channel, thread_ts or ts), None)

    def check_streaming(self, channel: str, ts: str, app_id: str) -> Stream:
        stream = self.streams.get((channel, ts))
        if stream is None or stream.app_id != app_id:
            raise EmulatorError("message_not_in_streaming_state")
        return stream

    def add_tasks(self, channel: str, ts: str, chunks: list[JSON]) -> None:
        tasks = self.tasks.setdefault((channel, ts), {})
        for chunk in chunks:
            if chunk.get("type") == "task_update":
                key = str(chunk.get("id") or len(tasks))
                tasks[key] = {**tasks.get(key, {}), **chunk}


def chunk_text(markdown_text: str | None, chunks: list[JSON]) -> str:
    """The text a call adds: its ``markdown_text``, then its ``markdown_text`` chunks."""
    text = markdown_text or ""
    for chunk in chunks:
        if chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text


def checked_chunks(value: Any) -> list[JSON]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise EmulatorError("invalid_chunks")
    for chunk in value:
        if chunk.get("type") not in CHUNK_TYPES:
            raise EmulatorError("invalid_chunks")
        if chunk.get("type") == "task_update" and not chunk.get("id"):
            raise EmulatorError("invalid_chunks")
    return list(value)


def checked_text(text: str | None) -> str | None:
    if text is not None and len(text) > STREAM_TEXT_LIMIT:
        raise EmulatorError("msg_too_long")
    return text


def checked_prompts(value: Any) -> list[JSON]:
    if not isinstance(value, list) or not value:
        raise EmulatorError("invalid_arguments")
    if len(value) > MAX_SUGGESTED_PROMPTS:
        raise EmulatorError("invalid_arguments")
    for prompt in value:
        if not isinstance(prompt, dict) or not prompt.get("title") or not prompt.get("message"):
            raise EmulatorError("invalid_arguments")
    return [{"title": str(p["title"]), "message": str(p["message"])} for p in value]
