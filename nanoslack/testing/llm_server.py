"""A small model server for tests: OpenAI Chat Completions and Anthropic Messages on 127.0.0.1.

The LLM back ends speak to it exactly as to a real provider (the SDKs over httpx2, which
respx cannot intercept). Each endpoint has a queue of scripted answers, taken in order;
when a queue is empty its ``default`` answers (a model that always calls a tool, say), and
without one the server answers 500 so a test that forgot an answer fails loudly. Every
request is recorded, whatever its path. An answer is a status, a JSON or text body and
headers (``Retry-After``), a delay (a slow model), a dropped connection (``Answer.drop``),
or a function of the request (a proxy echoing what it was sent).

Usable from an in-process fleet and from a ``nanoslack run`` subprocess alike: it only
needs its URL (``openai_url`` for ``OPENAI_BASE_URL``, ``anthropic_url`` for
``ANTHROPIC_BASE_URL``) and the test's event loop running while it waits.

    async with LLMServer() as llm:
        llm.openai.push(openai_tools(("read_skill", {"name": "review"})), openai_text("done"))
        ... OPENAI_BASE_URL=llm.openai_url ...
        assert llm.openai.requests[1].tool_results() == [...]
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from nanoslack.testing.ports import serve

HOST = "127.0.0.1"
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]  # keys lower-cased
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def tool_results(self) -> list[str]:
        """The texts of the tool results this request sends back to the model, in order."""
        body = self.json or {}
        results: list[str] = []
        for message in body.get("messages", []):
            if message.get("role") == "tool":  # Chat Completions
                results.append(_text(message.get("content")))
            elif message.get("role") == "user" and isinstance(message.get("content"), list):
                results += [
                    _text(block.get("content"))
                    for block in message["content"]
                    if isinstance(block, dict) and block.get("type") == "tool_result"
                ]
        return results

    def images(self) -> list[tuple[str, bytes]]:
        """The images this request shows the model, in order: (media type, bytes), from
        Chat Completions' ``image_url`` data URLs and Anthropic's base64 ``image`` blocks."""
        body = self.json or {}
        found: list[tuple[str, bytes]] = []
        for message in body.get("messages", []):
            content = message.get("content")
            for part in content if isinstance(content, list) else ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "image_url":
                    url = str((part.get("image_url") or {}).get("url", ""))
                    head, _, data = url.partition(",")
                    if head.startswith("data:") and head.endswith(";base64"):
                        found.append((head[5:-7], base64.b64decode(data)))
                elif part.get("type") == "image":
                    source = part.get("source") or {}
                    if source.get("type") == "base64":
                        found.append(
                            (str(source.get("media_type")), base64.b64decode(source.get("data", "")))
                        )
        return found

    def tool_result_blocks(self) -> list[dict[str, Any]]:
        """Anthropic's ``tool_result`` blocks (``is_error`` included), in order."""
        body = self.json or {}
        return [
            block
            for message in body.get("messages", [])
            if message.get("role") == "user" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else json.dumps(content)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    json: Any = None
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a slow model, a read timeout)
    drop: bool = False  # close the connection without answering
    # Asked to stream (``"stream": true``), a JSON answer goes out as the API's server-sent
    # events, its texts and tool arguments cut into pieces of ``chunk_chars``, one every
    # ``chunk_delay`` seconds; after ``hold_at`` events the server waits for ``gate``.
    chunk_chars: int = 32
    chunk_delay: float = 0.0
    gate: asyncio.Event | None = None
    hold_at: int = 0
    # A held model: nothing is sent until the test sets it (streamed or not).
    hold: asyncio.Event | None = None


Script = Answer | Callable[[Request], Answer]


class Endpoint:
    """One endpoint's script and record."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: deque[Script] = deque()
        self.default: Script | None = None
        self.requests: list[Request] = []
        self.finished = 0  # streamed answers sent to their end

    def push(self, *answers: Script) -> None:
        self._queue.extend(answers)

    def next(self, request: Request) -> Answer:
        script = self._queue.popleft() if self._queue else self.default
        if script is None:
            return Answer(500, json={"error": {"message": f"llm_server: no answer scripted for {self.name}"}})
        return script(request) if callable(script) else script

    @property
    def pending(self) -> int:
        return len(self._queue)


REQUEST_MAX_BYTES = 32 * 1024 * 1024


class LLMServer:
    def __init__(self) -> None:
        self.openai = Endpoint("openai")
        self.anthropic = Endpoint("anthropic")
        self.requests: list[Request] = []  # every request, any path
        # ("start" | "end", index in ``requests``), in the order they happened: whether two
        # requests were in flight at once, with no clock (``most_in_flight``).
        self.timeline: list[tuple[str, int]] = []
        self._runner: web.AppRunner | None = None
        self._drops: set[asyncio.Task[Any]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    async def start(self) -> LLMServer:
        # Providers take requests far larger than aiohttp's 1 MB default (a conversation that
        # carries a tool call's megabyte of arguments, as a refused ``send_file``'s does).
        app = web.Application(client_max_size=REQUEST_MAX_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.port = await serve(app, HOST)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LLMServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        request = Request(
            http.method, http.path, {k.lower(): v for k, v in http.headers.items()}, await http.read()
        )
        index = len(self.requests)
        self.requests.append(request)
        self.timeline.append(("start", index))
        try:
            return await self._answer(http, request)
        finally:
            self.timeline.append(("end", index))

    def most_in_flight(self) -> int:
        """The most requests the server was answering at once, so far."""
        now = most = 0
        for event, _ in self.timeline:
            now += 1 if event == "start" else -1
            most = max(most, now)
        return most

    async def _answer(self, http: web.Request, request: Request) -> web.StreamResponse:
        endpoint = self._endpoint(http.method, http.path)
        if endpoint is None:
            return web.json_response({"error": {"message": f"no such endpoint {http.path}"}}, status=404)
        endpoint.requests.append(request)
        answer = endpoint.next(request)
        if answer.hold is not None:
            await answer.hold.wait()
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.drop:
            assert http.transport is not None
            http.transport.close()
            return web.Response(status=500)  # never reaches the client: the connection is gone
        if answer.json is not None and answer.status == 200 and _asks_stream(request):
            return await self._stream(http, endpoint, answer)
        if answer.json is not None:
            return web.json_response(answer.json, status=answer.status, headers=answer.headers)
        return web.Response(status=answer.status, text=answer.text or "", headers=answer.headers)

    async def _stream(self, http: web.Request, endpoint: Endpoint, answer: Answer) -> web.StreamResponse:
        events = (openai_events if endpoint is self.openai else anthropic_events)(
            answer.json, answer.chunk_chars
        )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **answer.headers})
        await response.prepare(http)
        try:
            for i, event in enumerate(events):
                if answer.gate is not None and i == answer.hold_at:
                    await answer.gate.wait()
                elif answer.chunk_delay and i:
                    await asyncio.sleep(answer.chunk_delay)
                await response.write(event.encode())
            await response.write_eof()
        except ConnectionError:
            return response  # the client went away mid-answer (a killed fleet)
        endpoint.finished += 1
        return response

    def _endpoint(self, method: str, path: str) -> Endpoint | None:
        if method != "POST":
            return None
        if path.endswith("/chat/completions"):
            return self.openai
        if path.endswith("/messages"):
            return self.anthropic
        return None


# -- streamed answers (server-sent events) ------------------------------------------------------


def _asks_stream(request: Request) -> bool:
    body = request.json
    return isinstance(body, dict) and bool(body.get("stream"))


def _cut(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))] or [""]


def openai_events(answer: dict[str, Any], size: int) -> list[str]:
    """A ``chat.completion`` as Chat Completions' ``chat.completion.chunk`` events."""
    head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = answer["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _cut(message.get("content") or "", size) if piece]
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        start = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [start]}))
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in _cut(function["arguments"], size)
        ]
    events.append(chunk({}, choice["finish_reason"]))
    events.append(f"data: {json.dumps(head | {'choices': [], 'usage': answer['usage']})}\n\n")
    return [*events, "data: [DONE]\n\n"]


def anthropic_events(answer: dict[str, Any], size: int) -> list[str]:
    """A Messages answer as its ``message_start`` … ``message_stop`` events."""

    def event(kind: str, body: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **body})}\n\n"

    usage = answer["usage"]
    start = answer | {
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0},
    }
    events = [event("message_start", {"message": start})]
    for i, block in enumerate(answer["content"]):
        if block["type"] == "text":
            events.append(
                event("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}})
            )
            events += [
                event("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": piece}})
                for piece in _cut(block["text"], size)
            ]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(event("content_block_start", {"index": i, "content_block": opened}))
            events += [
                event(
                    "content_block_delta",
                    {"index": i, "delta": {"type": "input_json_delta", "partial_json": piece}},
                )
                for piece in _cut(json.dumps(block["input"]), size)
            ]
        events.append(event("content_block_stop", {"index": i}))
    stop = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
    events.append(event("message_delta", {"delta": stop, "usage": {"output_tokens": usage["output_tokens"]}}))
    return [*events, event("message_stop", {})]


# -- answers in each API's shape ----------------------------------------------------------------

ToolCall = tuple[str, dict[str, Any]]


def openai_answer(
    *calls: ToolCall, content: str | None = None, tokens: tuple[int, int] = (40, 2), cached: int = 0
) -> Answer:
    """A Chat Completions answer: the tool calls (name, arguments) in order, ``content``
    the model's own text; usage as (prompt, completion) tokens, ``cached`` of the prompt
    tokens read from the provider's cache (``prompt_tokens_details.cached_tokens``)."""
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]
    return openai_raw(tool_calls, content=content, tokens=tokens, cached=cached)


def openai_raw(
    tool_calls: list[dict[str, Any]],
    *,
    content: str | None = None,
    tokens: tuple[int, int] = (40, 2),
    cached: int = 0,
) -> Answer:
    """A Chat Completions answer with the tool calls exactly as given (malformed ones included)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Answer(
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "test-model",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
            ],
            "usage": {
                "prompt_tokens": tokens[0],
                "completion_tokens": tokens[1],
                "total_tokens": tokens[0] + tokens[1],
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


def openai_text(content: str = "", *, tokens: tuple[int, int] = (40, 2), cached: int = 0) -> Answer:
    """A Chat Completions answer with no tool call (the model is done)."""
    return openai_raw([], content=content, tokens=tokens, cached=cached)


def send(text: str) -> ToolCall:
    return ("send_message", {"text": text})


def anthropic_answer(*calls: ToolCall, text: str | None = None, tokens: tuple[int, int] = (30, 12)) -> Answer:
    """A Messages answer: a ``text`` block (when given) then one ``tool_use`` block per call."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    blocks += [
        {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
        for i, (name, args) in enumerate(calls)
    ]
    return Answer(
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": blocks,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
        }
    )


def anthropic_text(text: str = "", *, tokens: tuple[int, int] = (30, 12)) -> Answer:
    return anthropic_answer(text=text, tokens=tokens)


def error(status: int, message: str = "error", *, retry_after: str | None = None) -> Answer:
    """An error in the providers' common shape (``{"error": {"message": …}}``)."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Answer(status, json={"error": {"type": "error", "message": message}}, headers=headers)


def backend_env(backend: str, server: LLMServer, key: str) -> dict[str, str]:
    """The ``.env`` keys that point the ``openai`` or ``anthropic`` back end at ``server``."""
    if backend == "openai":
        return {
            "NANOSLACK_AGENT": "openai",
            "NANOSLACK_MODEL": "local-model",
            "OPENAI_BASE_URL": server.openai_url,
            "OPENAI_API_KEY": key,
        }
    return {
        "NANOSLACK_AGENT": "anthropic",
        "NANOSLACK_MODEL": "claude-local",
        "ANTHROPIC_BASE_URL": server.anthropic_url,
        "ANTHROPIC_API_KEY": key,
    }
