"""A small sync client for the emulator's HTTP driver API (`/_emulator/...`)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]


class EmulatorClientError(Exception):
    pass


class EmulatorClient:
    """Same method names as the Python driver; returns plain dicts/lists (JSON)."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/api"):
            base = base[: -len("/api")]
        self.base_url = base
        self.api_url = base + "/api/"
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _req(self, path: str, body: JSON | None = None, method: str = "POST") -> Any:
        url = f"{self.base_url}/_emulator/{path}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode({k: v for k, v in body.items() if v is not None})
        elif body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise EmulatorClientError(f"{path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from e

    def workspace(self) -> JSON:
        r: JSON = self._req("workspace", method="GET")
        return r

    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> JSON:
        r: JSON = self._req("users", {"name": name, "real_name": real_name, "id": id})
        return r

    def add_app(self, name: str, **kw: Any) -> JSON:
        r: JSON = self._req("apps", {"name": name, **kw})
        return r

    def create_conversation(self, members: list[str], kind: str = "mpim", name: str | None = None) -> JSON:
        r: JSON = self._req("conversations", {"members": members, "kind": kind, "name": name})
        return r

    def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        r = self._req("post", {"user_id": user_id, "channel": channel, "text": text, "thread_ts": thread_ts})
        return str(r["ts"])

    def share_file(
        self,
        user_id: str,
        channel: str,
        name: str,
        content: bytes | str,
        thread_ts: str | None = None,
        text: str = "",
        mimetype: str | None = None,
        title: str | None = None,
        check_file_info: bool = False,
        fault: str | None = None,
        location: str | None = None,
    ) -> JSON:
        """A person shares a file: the ``file_share`` message."""
        body: JSON = {
            "user_id": user_id,
            "channel": channel,
            "name": name,
            "thread_ts": thread_ts,
            "text": text,
        }
        body |= {"mimetype": mimetype, "title": title, "check_file_info": check_file_info}
        body |= {"fault": fault, "location": location}
        if isinstance(content, bytes):
            body["content_b64"] = base64.b64encode(content).decode()
        else:
            body["content"] = content
        r: JSON = self._req("share_file", body)
        return r

    def set_file_fault(self, file_id: str, fault: str | None, location: str | None = None) -> None:
        self._req("file_fault", {"file_id": file_id, "fault": fault, "location": location})

    def edit_as_user(self, user_id: str, channel: str, ts: str, text: str) -> JSON:
        r: JSON = self._req("edit", {"user_id": user_id, "channel": channel, "ts": ts, "text": text})
        return r

    def delete_as_user(self, user_id: str, channel: str, ts: str) -> None:
        self._req("delete", {"user_id": user_id, "channel": channel, "ts": ts})

    def bulk_post(
        self,
        user_id: str,
        channel: str,
        texts: list[str] | None = None,
        count: int | None = None,
        text: str = "message",
    ) -> JSON:
        body: JSON = {"user_id": user_id, "channel": channel}
        if texts is not None:
            body["texts"] = texts
        else:
            body["count"] = count
            body["text"] = text
        r: JSON = self._req("bulk_post", body)
        return r

    def conversation_messages(self, channel: str) -> list[JSON]:
        r: list[JSON] = self._req("messages", {"channel": channel}, method="GET")
        return r

    def all_messages(self, channel: str) -> list[JSON]:
        r: list[JSON] = self._req("messages", {"channel": channel, "flat": "1"}, method="GET")
        return r

    @property
    def api_calls(self) -> list[JSON]:
        r: list[JSON] = self._req("api_calls", method="GET")
        return r

    def fail_next(
        self,
        method: str,
        n: int = 1,
        error: str = "ratelimited",
        retry_after: int = 1,
        app_id: str | None = None,
    ) -> None:
        body = {"method": method, "n": n, "error": error, "retry_after": retry_after, "app_id": app_id}
        self._req("fail_next", body)

    def set_non_marketplace(self, on: bool = True) -> None:
        self._req("non_marketplace", {"on": on})

    def clear_faults(self, method: str | None = None) -> None:
        self._req("clear_faults", {"method": method} if method else {})

    def revoke_token(self, token: str) -> None:
        self._req("revoke_token", {"token": token})

    def drop_sockets(self, app_id: str) -> int:
        return int(self._req("drop_sockets", {"app_id": app_id})["dropped"])

    def send_disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        return int(self._req("disconnect", {"app_id": app_id, "reason": reason})["sent"])

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self._req("withhold_acks", {"app_id": app_id, "n": n})

    def stats(self, app_id: str | None = None) -> JSON:
        r: JSON = self._req("stats", {"app_id": app_id} if app_id else None, method="GET")
        return r

    def connections(self, app_id: str) -> int:
        return int(self._req("connections", {"app_id": app_id}, method="GET")["connections"])

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        """Seconds from sending each envelope to receiving its ack (one app or all)."""
        body: JSON = {"app_id": app_id} if app_id else {}
        if clear:
            body["clear"] = "1"
        return [float(x) for x in self._req("ack_latencies", body or None, method="GET")["latencies"]]

    def click_button(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> JSON:
        r: JSON = self._req(
            "click",
            {
                "user_id": user_id,
                "channel": channel,
                "message_ts": message_ts,
                "action_id": action_id,
                "value": value,
            },
        )
        return r

    def react(self, user_id: str, channel: str, ts: str, reaction: str) -> None:
        self._req("react", {"user_id": user_id, "channel": channel, "ts": ts, "reaction": reaction})

    def click_stop(self, user_id: str, channel: str, thread_ts: str) -> JSON:
        r: JSON = self._req("stop", {"user_id": user_id, "channel": channel, "thread_ts": thread_ts})
        return r

    def session(self, channel: str, thread_ts: str) -> JSON | None:
        r: JSON | None = self._req("session", {"channel": channel, "thread_ts": thread_ts}, method="GET")[
            "session"
        ]
        return r

    def home_view(self, app_ref: str, user_id: str) -> JSON | None:
        r: JSON | None = self._req("home", {"app_id": app_ref, "user_id": user_id}, method="GET")["view"]
        return r

    def open_app_home(self, user_id: str, app_ref: str, tab: str = "home") -> JSON:
        r: JSON = self._req("open_home", {"user_id": user_id, "app_id": app_ref, "tab": tab})
        return r

    def change_app_context(self, app_ref: str, channel: str | None = None) -> JSON:
        r: JSON = self._req("app_context", {"app_id": app_ref, "channel": channel})
        return r

    def click_feedback(self, user_id: str, channel: str, message_ts: str, positive: bool = True) -> JSON:
        body = {"user_id": user_id, "channel": channel, "message_ts": message_ts, "positive": positive}
        r: JSON = self._req("feedback", body)
        return r

    def click_home_button(self, user_id: str, app_ref: str, action_id: str, value: str | None = None) -> JSON:
        body = {"user_id": user_id, "app_id": app_ref, "action_id": action_id, "value": value}
        r: JSON = self._req("home_click", body)
        return r

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            r = predicate()
            if r:
                return r
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout}s; stats={self.stats()}")
            time.sleep(interval)
