"""Typed, frozen views of the event payloads the session model reads.

The CLI's schema drifts and a log may hold anything, so every field check lives here: a
view holds a field's value when it has the expected type, else None (or a neutral value).
The model then reads plain attributes and never tests a type itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from .events import Event


def as_str(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def as_num(value: Any) -> float:
    """A number (not a bool), or 0; an integer too large for a float is infinite (a metric clamps it, and says so)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return 0.0
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def as_int(value: Any) -> int | None:
    """An int (a bool is not one), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


class SessionFacts(Struct, frozen=True):
    """session.start / session.resume: what the session runs with, and where (the git context, if any)."""

    model: str | None
    cwd: str | None
    cli_version: str | None
    repository: str | None = None  # "owner/name"
    branch: str | None = None
    head_commit: str | None = None
    repository_host: str | None = None  # e.g. github.com
    host_type: str | None = None  # github or ado

    def merged(self, newer: SessionFacts) -> SessionFacts:
        """These facts, updated with what ``newer`` knows."""
        names = self.__struct_fields__  # in declaration order (__slots__ of a struct is not)
        return SessionFacts(*(new if new is not None else old for new, old in zip(
            (getattr(newer, name) for name in names), (getattr(self, name) for name in names))))

    @staticmethod
    def of(event: Event) -> SessionFacts:
        data = event.data
        context = _dict(data.get("context"))
        return SessionFacts(as_str(data.get("selectedModel")), as_str(context.get("cwd")),
                            as_str(data.get("copilotVersion")), as_str(context.get("repository")),
                            as_str(context.get("branch")), as_str(context.get("headCommit")),
                            as_str(context.get("repositoryHost")), as_str(context.get("hostType")))


class UserMessage(Struct, frozen=True):
    """user.message: a prompt, an autopilot nudge, or a sub-agent's prompt."""

    interaction_id: str | None
    nudge: bool
    for_subagent: bool  # a sub-agent's prompt: its work hangs under the task call
    content: Any
    text: Any = None  # what the model got: the CLI's transformedContent, else the content

    @staticmethod
    def of(event: Event) -> UserMessage:
        data = event.data
        source = as_str(data.get("source")) or ""
        content, transformed = data.get("content"), data.get("transformedContent")
        return UserMessage(event.interaction_id,
                           data.get("isAutopilotContinuation") is True or data.get("source") == "autopilot",
                           event.agent_id is not None or source.startswith("agent-"), content,
                           transformed if isinstance(transformed, str) and transformed else content)


class Usage(Struct, frozen=True):
    """One LLM call's usage: session.usage_record's ``usage``, assistant.usage's data, or what the
    headless stream knows (model.call_finished / model.call_failure)."""

    fields: Mapping[str, Any]  # the usage object itself: tokens and extras are read by spanattrs
    model: str | None
    api_call_id: str | None
    duration_ms: float

    @staticmethod
    def of(event: Event) -> Usage | None:
        """None when the event carries no usage object."""
        usage = event.data.get("usage") if event.type == "session.usage_record" else event.data
        if not isinstance(usage, dict):
            return None
        return Usage(usage, as_str(usage.get("model")), as_str(usage.get("apiCallId")), as_num(usage.get("duration")))

    @property
    def nano_aiu(self) -> int | None:
        """The call's AI credits in nano AIU (``copilotUsage.totalNanoAiu``), or None when it reported no
        amount (no copilotUsage, or ``aiCreditsStatus: unavailable``: then zero is no zero-cost claim)."""
        billed = self.fields.get("copilotUsage")
        total = billed.get("totalNanoAiu") if isinstance(billed, dict) else None
        if self.credits_status == "unavailable" or not isinstance(total, (int, float)) or isinstance(total, bool) \
                or not 0 <= total < 1e18:
            return None
        return round(total)

    @property
    def credits_status(self) -> str | None:
        """``aiCreditsStatus`` as the CLI wrote it (complete, partial, unavailable), or None."""
        return as_str(self.fields.get("aiCreditsStatus"))

    @staticmethod
    def known(model: str | None, duration: Any) -> Usage:
        """A call known only by its model and duration (the headless stream)."""
        return Usage({"model": model, "duration": duration}, model, None, as_num(duration))


class ToolStart(Struct, frozen=True):
    """tool.execution_start (or tool.user_requested: a command the user ran)."""

    call_id: str | None
    name: str
    arguments: Any
    mcp_server: str | None = None  # mcpServerName of an MCP server's tool

    @staticmethod
    def of(event: Event) -> ToolStart:
        return ToolStart(event.tool_call_id, as_str(event.data.get("toolName")) or "unknown",
                         event.data.get("arguments"), as_str(event.data.get("mcpServerName")))


# The CLI's marker at the end of a shell tool's result, where older CLIs (up to 1.0.70) keep the exit code.
_EXIT_MARKER = re.compile(r"<(?:exited|shellId: [^<>\s]{1,64} completed) with exit code (-?\d{1,10})>\s*\Z")


def _exit_code(data: Mapping[str, Any]) -> int | None:
    """The exit code of a shell tool's command, wherever this CLI version keeps it: ``shellExecution`` (1.0.85+),
    ``toolTelemetry.metrics.exit_code`` (1.0.70+, a float from 1.0.92), a ``shell_exit`` or ``terminal`` content
    block, or the marker the CLI appends to the result's text."""
    code = _dict(data.get("shellExecution")).get("exitCode")
    if as_int(code) is None:
        code = _dict(_dict(data.get("toolTelemetry")).get("metrics")).get("exit_code")
    if as_int(code) is None and isinstance(code, float) and code.is_integer():
        code = int(code)
    result = _dict(data.get("result"))
    contents = result.get("contents")
    for block in contents if as_int(code) is None and isinstance(contents, list) else ():
        if isinstance(block, dict) and block.get("type") in ("shell_exit", "terminal"):
            code = block.get("exitCode")
            break
    content = result.get("content")
    if as_int(code) is None and isinstance(content, str):
        marker = _EXIT_MARKER.search(content[-200:])
        code = int(marker.group(1)) if marker else None
    return as_int(code)


class ToolEnd(Struct, frozen=True):
    """tool.execution_complete.

    ``success`` is the CLI's own flag; a shell command that exited non-zero (or timed out) has it true, while
    the CLI shows the call as failed: ``failed`` says what the CLI shows.
    """

    call_id: str | None
    success: bool
    exit_code: int | None
    error_code: str | None
    error_message: Any
    result: Any
    shell_error: str | None = None  # toolTelemetry's shell_error_category (command_nonzero_exit, command_timeout)

    @property
    def failed(self) -> bool:
        """The call failed as the CLI shows it: not a success, or a command that exited non-zero or timed out."""
        return not self.success or bool(self.exit_code) or self.shell_error is not None

    @property
    def failure_type(self) -> str:
        """``error.type`` of a failed call: the CLI's error code, else its shell error category, else
        ``command_nonzero_exit`` for a command that exited non-zero."""
        if not self.success:
            return self.error_code or "tool_error"
        return self.shell_error or "command_nonzero_exit"

    @property
    def failure_message(self) -> str:
        """What went wrong, in words: the CLI's error message, else the command's exit code."""
        if not self.success:
            return self.error_message if isinstance(self.error_message, str) and self.error_message else "failed"
        if self.exit_code:
            return f"exit code {self.exit_code}"
        return (self.shell_error or "failed").replace("_", " ")

    @staticmethod
    def of(event: Event) -> ToolEnd:
        data = event.data
        error = data.get("error")
        category = as_str(_dict(_dict(data.get("toolTelemetry")).get("properties")).get("shell_error_category"))
        return ToolEnd(event.tool_call_id, data.get("success") is not False, _exit_code(data),
                       as_str(error.get("code")) if isinstance(error, dict) else None,
                       error.get("message") if isinstance(error, dict) else None, data.get("result"),
                       category[:64] if category else None)


class SubagentStart(Struct, frozen=True):
    """subagent.started."""

    call_id: str | None
    name: str

    @staticmethod
    def of(event: Event) -> SubagentStart:
        data = event.data
        return SubagentStart(event.tool_call_id,
                             as_str(data.get("agentName")) or as_str(data.get("agentDisplayName")) or "subagent")


class SubagentEnd(Struct, frozen=True):
    """subagent.completed / subagent.failed."""

    call_id: str | None
    failed: bool
    cancelled: bool  # cut off by an abort (subagent.completed with cancelled: true)
    total_tokens: int | None
    tool_calls: int | None
    error: Any
    error_type: str | None

    @staticmethod
    def of(event: Event) -> SubagentEnd:
        data = event.data
        tokens, calls = data.get("totalTokens"), data.get("totalToolCalls")
        return SubagentEnd(event.tool_call_id, event.type == "subagent.failed", data.get("cancelled") is True,
                           tokens if isinstance(tokens, int) else None, calls if isinstance(calls, int) else None,
                           data.get("error"), as_str(data.get("errorType")))


class SessionError(Struct, frozen=True):
    """session.error: why the agent loop stopped (an LLM call that failed, mostly)."""

    error_type: str
    status_code: int | None
    message: Any = None  # the provider's error text may echo what was sent: exported only with content capture
    error_code: str | None = None

    @staticmethod
    def of(event: Event) -> SessionError:
        data = event.data
        status = data.get("statusCode")
        return SessionError(as_str(data.get("errorType")) or "session_error", as_int(status), data.get("message"),
                            as_str(data.get("errorCode")))


class TaskComplete(Struct, frozen=True):
    """session.task_complete."""

    summary: str | None
    failed: bool

    @staticmethod
    def of(event: Event) -> TaskComplete:
        return TaskComplete(as_str(event.data.get("summary")), event.data.get("success") is False)


def requested_tools(event: Event) -> bool:
    """assistant.message: did this turn ask for tools?"""
    requests = event.data.get("toolRequests")
    return isinstance(requests, list) and bool(requests)


def request_id(event: Event) -> str | None:
    """The id of a request put to the user (permission, input, ...) or of its answer."""
    return as_str(event.data.get("requestId"))


_ASKED = {"user_input": "input", "elicitation": "input", "exit_plan_mode": "plan approval"}


class UserRequest(Struct, frozen=True):
    """A question put to the user: its kind (permission, user_input, ...), the permission's kind, the tool call."""

    kind: str
    permission: str | None
    call_id: str | None

    def describe(self, tool: str | None) -> str:
        """``permission for bash`` (the gated tool, else the permission's kind), ``input``, ``plan approval``."""
        if self.kind == "permission":
            return f"permission for {tool or self.permission or 'a tool'}"
        return _ASKED.get(self.kind, self.kind)


def user_request(event: Event) -> UserRequest:
    """What a ``*.requested`` event asks the user."""
    data = event.data
    asked = data.get("permissionRequest")
    asked = asked if isinstance(asked, dict) else {}
    return UserRequest(event.type.rsplit(".", 1)[0], as_str(asked.get("kind")),
                       as_str(data.get("toolCallId")) or as_str(asked.get("toolCallId")))


def permission_result(event: Event) -> str | None:
    """How a permission was answered (``approved``, ``denied-...``)."""
    result = event.data.get("result")
    return as_str(result.get("kind")) if isinstance(result, dict) else as_str(result)
