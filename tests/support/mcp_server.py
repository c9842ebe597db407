#!/usr/bin/env python3
"""A tiny MCP server on stdio (newline-delimited JSON-RPC), for the Copilot CLI to call in recordings.

Tools: ``echo`` (answers its text), ``fail`` (a tool error: ``isError``), ``slow`` (sleeps longer than the
CLI's timeout for it) and ``crash`` (the server exits in the middle of the call). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time

SLOW_SECONDS = 20
TOOLS = [
    {"name": name, "description": text, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    for name, text in (("echo", "Echo the text back."), ("fail", "Always fails."),
                       ("slow", f"Takes {SLOW_SECONDS} seconds."), ("crash", "Kills the server mid-call."))
]


def answer(request_id: object, result: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def call(name: str, args: dict) -> dict:
    text = str(args.get("text", ""))
    if name == "echo":
        return {"content": [{"type": "text", "text": f"echo: {text}"}]}
    if name == "fail":
        return {"content": [{"type": "text", "text": "the probe tool failed on purpose"}], "isError": True}
    if name == "slow":
        time.sleep(SLOW_SECONDS)  # the thing under test: a slow MCP tool
        return {"content": [{"type": "text", "text": "slow done"}]}
    os._exit(3)  # crash: no answer, the pipe closes


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            answer(rid, {"protocolVersion": msg.get("params", {}).get("protocolVersion", "2024-11-05"),
                         "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1.0"}})
        elif method == "tools/list":
            answer(rid, {"tools": TOOLS})
        elif method == "tools/call":
            params = msg.get("params") or {}
            answer(rid, call(params.get("name", ""), params.get("arguments") or {}))
        else:
            answer(rid, {})


if __name__ == "__main__":
    main()
