"""Session events for unit tests, written in the shapes the real CLI (1.0.102) writes.

A :class:`SessionLog` is written one event at a time, in order, as the CLI appends them::

    log = SessionLog("s-1")
    log.start()
    log.user("hello")                      # a new interaction
    log.turn_start()                       # turn "0" of the main agent
    log.usage(input_tokens=100, output_tokens=20, duration_ms=300)
    log.message(tools=["bash"])
    log.tool_start("bash", "call-1")
    log.tool_complete("call-1")
    log.turn_end()
    log.turn_start()                       # turn "1"
    log.usage()
    log.message("All done.")
    log.turn_end()
    log.shutdown()

    log.events()   # list[Event], decoded from the lines with their offsets, as the tailer makes them
    log.jsonl()    # the bytes of events.jsonl

Each method returns the event it wrote (a dict: ``entry["id"]``, ``log.ns(entry)``). The clock
moves ``step_ms`` between events; ``wait(seconds)`` moves it further. A sub-agent's events
name it with ``agent=``: they carry the top-level ``agentId`` and ``data.parentToolCallId`` (the
``task`` call that spawned it), and its turn ids restart at "0", as in the real logs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import decode_line

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BASE_TIME = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
MODEL = "test-model"
CLI_VERSION = "1.0.102"


def iso(moment: datetime) -> str:
    """The CLI's timestamp form: 2026-12-03T12:00:00.000Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class SessionLog:
    """One session's events.jsonl, written event by event."""

    def __init__(self, session_id: str = "session-1", *, start: datetime = BASE_TIME, step_ms: int = 10,
                 model: str = MODEL) -> None:
        self.session_id = session_id
        self.model = model
        self.step_ms = step_ms
        self.entries: list[dict[str, Any]] = []  # every event written, repeats included (not raw lines)
        self._lines: list[bytes] = []
        self._now = start
        self._ns: dict[str, int] = {}
        self._count = 0
        self.interaction: str | None = None  # the main agent's interaction
        self._agent_interaction: dict[str, str] = {}
        self._agent_call: dict[str, str] = {}  # agentId -> toolCallId of the task call that spawned it
        self._turn: dict[str | None, str] = {}  # agent -> its open turn id
        self._next_turn: dict[tuple[str | None, str | None], int] = {}
        self._calls = 0
        self._interactions = 0

    # ------------------------------------------------------------ writing

    def wait(self, seconds: float) -> None:
        """Let time pass before the next event."""
        self._now += timedelta(seconds=seconds)

    def add(self, event_type: str, data: dict[str, Any] | None = None, *, agent: str | None = None,
            ephemeral: bool = False, event_id: str | None = None) -> dict[str, Any]:
        """Write one event of any type (the other methods write the types the CLI writes)."""
        if self.entries:
            self._now += timedelta(milliseconds=self.step_ms)
        self._count += 1
        entry: dict[str, Any] = {
            "type": event_type,
            "data": dict(data or {}),
            "id": event_id or f"{self.session_id}-e{self._count:03d}",
            "timestamp": iso(self._now),
            "parentId": self.entries[-1]["id"] if self.entries else None,
        }
        if agent is not None:
            entry["agentId"] = agent
            if agent in self._agent_call and event_type not in ("subagent.started", "subagent.completed",
                                                                 "subagent.failed"):
                entry["data"].setdefault("parentToolCallId", self._agent_call[agent])
        if ephemeral:
            entry["ephemeral"] = True
        self._write(entry)
        return entry

    def repeat(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Write an event again, the same id, time and all (a log copied into itself)."""
        self.entries.append(entry)
        self._lines.append(json.dumps(entry, separators=(",", ":")).encode())
        return entry

    def line(self, raw: bytes) -> None:
        """Write a line as it is (a malformed one, say)."""
        self._lines.append(raw)

    def _write(self, entry: dict[str, Any]) -> None:
        self._ns[entry["id"]] = (self._now - EPOCH) // timedelta(microseconds=1) * 1000
        self.repeat(entry)

    # ------------------------------------------------------------ reading back

    def ns(self, entry: dict[str, Any]) -> int:
        """The event's timestamp in nanoseconds since the epoch."""
        return self._ns[entry["id"]]

    def lines(self) -> list[bytes]:
        """Each line, without its newline."""
        return list(self._lines)

    def jsonl(self, start: int = 0, stop: int | None = None) -> bytes:
        """The whole file, or its lines ``start`` to ``stop`` (0-based, as a slice)."""
        return b"".join(line + b"\n" for line in self._lines[start:stop])

    def decoded(self) -> list[Event | DecodeError]:
        """Every line decoded, with its byte offset and line number."""
        items, offset = [], 0
        for number, raw in enumerate(self._lines, 1):
            items.append(decode_line(raw, offset=offset, line=number))
            offset += len(raw) + 1
        return items

    def events(self) -> list[Event]:
        """Every line as an Event (the lines written with ``line`` must decode too)."""
        items = self.decoded()
        bad = [item for item in items if isinstance(item, DecodeError)]
        assert not bad, f"lines that are no events: {bad}"
        return [item for item in items if isinstance(item, Event)]

    # ------------------------------------------------------------ the session

    def start(self, *, model: str | None = None, cwd: str = "/work", version: str = CLI_VERSION,
              **context: Any) -> dict[str, Any]:
        """session.start; ``context`` adds to its context (``repository=``, ``branch=``, ``gitRoot=``...)."""
        return self.add("session.start", {
            "sessionId": self.session_id, "version": 1, "producer": "copilot-agent", "copilotVersion": version,
            "startTime": iso(self._now), "selectedModel": model or self.model, "context": {"cwd": cwd, **context},
            "alreadyInUse": False})

    def resume(self, *, model: str | None = None, cwd: str = "/work") -> dict[str, Any]:
        """session.resume (the CLI took the session up again)."""
        return self.add("session.resume", {"resumeTime": iso(self._now), "selectedModel": model or self.model,
                                           "context": {"cwd": cwd}, "sessionWasActive": False})

    def user(self, content: str = "Please do the task.", *, interaction: str | None = None,
             nudge: bool = False) -> dict[str, Any]:
        """user.message: a prompt (a new interaction), or with ``nudge`` an autopilot continuation."""
        self._interactions += 1
        self.interaction = interaction or f"interaction-{self._interactions}"
        data: dict[str, Any] = {"content": "" if nudge else content, "messageId": f"message-{self._count + 1}",
                                "delivery": "idle", "interactionId": self.interaction, "turnId": "0"}
        if nudge:
            data.update(source="autopilot", isAutopilotContinuation=True)
        return self.add("user.message", data)

    def subagent_prompt(self, agent: str, content: str = "Please help.") -> dict[str, Any]:
        """A sub-agent's own prompt: a user.message with source agent-<sessionId>, in the sub-agent's interaction."""
        interaction = self._agent_interaction[agent] = f"{agent}-interaction"
        return self.add("user.message", {"content": content, "source": f"agent-{self.session_id}",
                                         "interactionId": interaction, "turnId": "0"}, agent=agent)

    def turn_start(self, *, agent: str | None = None, turn: str | None = None) -> dict[str, Any]:
        """assistant.turn_start: the next turn of the agent in its interaction ("0", "1", ...)."""
        interaction = self._agent_interaction.get(agent, self.interaction) if agent else self.interaction
        if turn is None:
            number = self._next_turn.get((agent, interaction), 0)
            turn = str(number)
        self._next_turn[(agent, interaction)] = int(turn) + 1 if turn.isdigit() else 0
        self._turn[agent] = turn
        return self.add("assistant.turn_start", {"turnId": turn, "interactionId": interaction}, agent=agent)

    def turn_end(self, *, agent: str | None = None, turn: str | None = None) -> dict[str, Any]:
        """assistant.turn_end of the agent's open turn (1.0.102 writes only its turnId)."""
        return self.add("assistant.turn_end", {"turnId": turn or self._turn.pop(agent, "0")}, agent=agent)

    def usage(self, *, agent: str | None = None, model: str | None = None, input_tokens: int = 4700,
              output_tokens: int = 42, cache_read: int = 137, cache_write: int = 0, duration_ms: float = 107,
              cost: float = 0.0, initiator: str = "user", finish_reason: str = "stop",
              api_call_id: str | None = None, extra: dict[str, Any] | None = None, nano_aiu: int | None = None,
              credits: str | None = None) -> dict[str, Any]:
        """session.usage_record: one LLM call, with its usage (``extra``: more usage keys, e.g. isByok;
        ``nano_aiu``: its AI credits, as copilotUsage with aiCreditsStatus ``credits`` or complete)."""
        self._calls += 1
        if nano_aiu is not None:
            extra = {"copilotUsage": {"totalNanoAiu": nano_aiu, "tokenDetails": []},
                     "aiCreditsStatus": credits or "complete", **(extra or {})}
        elif credits is not None:
            extra = {"aiCreditsStatus": credits, **(extra or {})}
        return self.add("session.usage_record", {"usage": {
            "model": model or self.model, "inputTokens": input_tokens, "outputTokens": output_tokens,
            "cacheReadTokens": cache_read, "cacheWriteTokens": cache_write, "cost": cost, "duration": duration_ms,
            "timeToFirstTokenMs": duration_ms * 0.9, "initiator": initiator,
            "apiCallId": api_call_id or f"chatcmpl-{self._calls}", "finishReason": finish_reason,
            **(extra or {})}}, agent=agent)

    def message(self, content: str = "", *, tools: tuple[str, ...] | list[str] = (),
                agent: str | None = None) -> dict[str, Any]:
        """assistant.message: the answer, and the tools this turn asks for (by name)."""
        requests = [{"toolCallId": f"request-{self._count + 1}-{i}", "name": name, "arguments": {},
                     "type": "function"} for i, name in enumerate(tools)]
        return self.add("assistant.message", {"model": self.model, "content": content, "toolRequests": requests,
                                              "interactionId": self._interaction_of(agent),
                                              "turnId": self._turn.get(agent, "0")}, agent=agent)

    def tool_start(self, name: str, call: str, *, arguments: Any = None, agent: str | None = None,
                   mcp_server: str | None = None) -> dict[str, Any]:
        """tool.execution_start (of an MCP server's tool: ``mcp_server``, as the CLI names it in mcpServerName)."""
        data = {"toolCallId": call, "toolName": name, "arguments": {} if arguments is None else arguments,
                "turnId": self._turn.get(agent, "0"), "model": self.model}
        if mcp_server is not None:
            data["mcpServerName"] = mcp_server
        return self.add("tool.execution_start", data, agent=agent)

    def tool_complete(self, call: str, *, success: bool = True, result: str = "ok", error: str = "Path does not exist",
                      error_code: str = "failure", exit_code: int | None = None,
                      agent: str | None = None) -> dict[str, Any]:
        """tool.execution_complete: a success with its result, or a failure with its error."""
        data: dict[str, Any] = {"toolCallId": call, "model": self.model, "interactionId": self._interaction_of(agent),
                                "turnId": self._turn.get(agent, "0"), "success": success}
        if exit_code is not None:
            data["shellExecution"] = {"exitCode": exit_code}
        if success:
            data["result"] = {"content": result}
        else:
            data["error"] = {"message": error, "code": error_code}
        return self.add("tool.execution_complete", data, agent=agent)

    def subagent_started(self, call: str, agent: str, name: str = "general-purpose") -> dict[str, Any]:
        """subagent.started: ``agent`` runs for the task call ``call``."""
        self._agent_call[agent] = call
        return self.add("subagent.started", {"toolCallId": call, "agentName": name,
                                             "agentDisplayName": "scripted-helper", "model": self.model}, agent=agent)

    def subagent_completed(self, call: str, agent: str, name: str = "general-purpose", *, total_tokens: int = 16910,
                           tool_calls: int = 1, cancelled: bool = False) -> dict[str, Any]:
        """subagent.completed (``cancelled``: cut off by an abort)."""
        data: dict[str, Any] = {"toolCallId": call, "agentName": name, "model": self.model,
                                "totalToolCalls": tool_calls, "totalTokens": total_tokens, "durationMs": 1187}
        if cancelled:
            data["cancelled"] = True
        return self.add("subagent.completed", data, agent=agent)

    def subagent_failed(self, call: str, agent: str, name: str = "general-purpose", *,
                        error: str = "the sub-agent failed") -> dict[str, Any]:
        """subagent.failed."""
        return self.add("subagent.failed", {"toolCallId": call, "agentName": name, "error": error}, agent=agent)

    def task_complete(self, summary: str = "Task finished.", *, success: bool = True) -> dict[str, Any]:
        """session.task_complete (after the task_complete tool)."""
        return self.add("session.task_complete", {"summary": summary, "success": success})

    def error(self, *, error_type: str = "query", status_code: int | None = 500,
              message: str = "Failed to get response from the AI model; retried 5 times",
              agent: str | None = None) -> dict[str, Any]:
        """session.error (an empty answer writes one without statusCode)."""
        data: dict[str, Any] = {"errorType": error_type, "message": message}
        if status_code is not None:
            data["statusCode"] = status_code
        return self.add("session.error", data, agent=agent)

    def permission_requested(self, request: str = "request-1") -> dict[str, Any]:
        """permission.requested: the CLI asks the person at the terminal."""
        return self.add("permission.requested", {"requestId": request, "permissionRequest": {"kind": "shell"}})

    def permission_completed(self, request: str = "request-1") -> dict[str, Any]:
        """permission.completed: the person (or a rule) answered."""
        return self.add("permission.completed", {"requestId": request, "result": {"kind": "approved"}})

    def abort(self, reason: str = "user_initiated") -> dict[str, Any]:
        """abort: the user stopped the loop (SIGINT/SIGTERM: user_initiated; Esc Esc: user_abort)."""
        return self.add("abort", {"reason": reason})

    def model_change(self, model: str) -> dict[str, Any]:
        """session.model_change."""
        return self.add("session.model_change", {"newModel": model})

    def shutdown(self, *, lines: tuple[int, int] = (0, 0), files: tuple[str, ...] = (),
                 premium: dict[str, float] | None = None, nano_aiu: dict[str, int] | None = None) -> dict[str, Any]:
        """session.shutdown with its code changes (lines added, removed; files) and, per model, the
        premium requests it totals (``modelMetrics[model].requests.cost``) and AI credits (``totalNanoAiu``)."""
        metrics: dict[str, dict[str, Any]] = {model: {"requests": {"count": 1, "cost": cost}}
                                              for model, cost in (premium or {}).items()}
        for model, total in (nano_aiu or {}).items():
            metrics.setdefault(model, {"requests": {"count": 1, "cost": 0.0}})["totalNanoAiu"] = total
        return self.add("session.shutdown", {
            "shutdownType": "routine", "totalPremiumRequests": sum((premium or {}).values()), "modelMetrics": metrics,
            "codeChanges": {"linesAdded": lines[0], "linesRemoved": lines[1], "filesModified": list(files)}})

    def idle(self) -> dict[str, Any]:
        """session.idle: ephemeral, only a live subscriber sees it."""
        return self.add("session.idle", {}, ephemeral=True)

    def _interaction_of(self, agent: str | None) -> str | None:
        return self._agent_interaction.get(agent, self.interaction) if agent else self.interaction

    # ------------------------------------------------------------ whole scenes

    def answer(self, content: str = "All done.", *, agent: str | None = None, **usage: Any) -> None:
        """One turn that makes one LLM call and answers without asking for tools."""
        self.turn_start(agent=agent)
        self.usage(agent=agent, **usage)
        self.message(content, agent=agent)
        self.turn_end(agent=agent)

    def calling(self, *calls: tuple[str, str], agent: str | None = None) -> dict[str, Any]:
        """A turn starts; its LLM call asks for the tools ``(name, call id)``, which start and keep running.
        Returns the last tool start."""
        self.turn_start(agent=agent)
        self.usage(agent=agent, finish_reason="tool_calls")
        self.message(tools=[name for name, _call in calls], agent=agent)
        return [self.tool_start(name, call, agent=agent) for name, call in calls][-1]

    def tool_turn(self, *calls: tuple[str, str], agent: str | None = None, success: bool = True) -> None:
        """One turn that makes one LLM call and runs the tools ``(name, call id)``, each to completion."""
        self.calling(*calls, agent=agent)
        for _name, call in calls:
            self.tool_complete(call, success=success, agent=agent)
        self.turn_end(agent=agent)

    def spawn(self, call: str, agent: str, name: str = "general-purpose", *, prompt: bool = True) -> dict[str, Any]:
        """A main-agent turn calls ``task``; sub-agent ``agent`` starts for it (and, with ``prompt``, gets
        its prompt). Returns the subagent.started event."""
        self.calling(("task", call))
        started = self.subagent_started(call, agent, name)
        if prompt:
            self.subagent_prompt(agent)
        return started

def event_line(event_type: Any, timestamp: Any, event_id: Any, data: Any = None, **top: Any) -> bytes:
    """One event as a JSON line, any field of any type (for lines planted into a real log)."""
    return json.dumps({"type": event_type, "data": {} if data is None else data, "id": event_id,
                       "timestamp": timestamp, "parentId": None, **top}).encode()


def cli_shows_failed(data: dict) -> bool:
    """Does the CLI show this tool.execution_complete's call as failed (read from the raw event, as a test's own
    oracle): ``success: false``, or a shell command that exited non-zero or timed out, which the CLI logs as a
    success (``shellExecution.exitCode``, its telemetry's ``shell_error_category``) and shows as failed."""
    if data.get("success") is False:
        return True
    code = (data.get("shellExecution") or {}).get("exitCode")
    if code not in (None, 0):
        return True
    properties = (data.get("toolTelemetry") or {}).get("properties") or {}
    return properties.get("shell_error_category") in ("command_nonzero_exit", "command_timeout")
