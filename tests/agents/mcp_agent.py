"""A ``command`` agent that uses the fleet's host tools over MCP, as an MCP-capable CLI does.

Run by the real ``command`` back end: ``python mcp_agent.py PLAN.json``. ``PLAN`` maps an
instance name to what that instance does in each of its turns::

    {"dana": {"calls": [["read_skill", {"name": "review"}], ...], "reply": "skill: {0}"}}

The agent connects to ``$NANOSLACK_MCP_URL`` with ``Authorization: Bearer
$NANOSLACK_MCP_TOKEN`` (the ``mcp`` package's streamable-HTTP client, with the
initialize handshake the CLIs of 2025 use), lists the tools, makes the calls in order and
prints ``reply`` with ``{i}`` replaced by the first line of call ``i``'s result. With
``"when": TEXT`` it does all that only in a turn whose prompt contains ``TEXT`` (in the
others it is silent). Each turn appends one JSON line to ``mcp_turns.jsonl`` beside the
plan: the instance, its stdin, the tools it was offered and each call's result. No plan
entry: it prints nothing and connects to nothing. The token is never written anywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


async def use_tools(calls: list[list[Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {os.environ['NANOSLACK_MCP_TOKEN']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(os.environ["NANOSLACK_MCP_URL"], http_client=http)
        async with Client(transport, mode="legacy") as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            results = []
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                text = "".join(getattr(block, "text", "") for block in result.content)
                results.append({"tool": name, "text": text, "is_error": bool(result.is_error)})
    return listed, results


def main() -> None:
    plan_file = Path(sys.argv[1])
    instance = os.environ["NANOSLACK_INSTANCE"]
    stdin = sys.stdin.read()
    plan = json.loads(plan_file.read_text()).get(instance)
    if plan is None:
        return
    acts = plan.get("when", "") in stdin
    listed, results = asyncio.run(use_tools(plan.get("calls", []))) if acts else ([], [])
    record = {"instance": instance, "stdin": stdin, "tools": listed, "results": results}
    # One write with O_APPEND: agents running at once never interleave their lines.
    fd = os.open(plan_file.with_name("mcp_turns.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, (json.dumps(record) + "\n").encode())
    os.close(fd)
    firsts = [(r["text"].splitlines() or [""])[0] for r in results]
    sys.stdout.write(plan.get("reply", "").format(*firsts) if acts else "")


if __name__ == "__main__":
    main()
