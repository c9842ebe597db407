"""What each span carries: the attributes of the invoke_agent, turn, chat and tool spans.

Pure functions from plain values (and the typed views) to attribute dicts. Key order is part
of the output (the OTLP JSON lines keep it), so each builder writes its keys in one fixed order.
"""

from __future__ import annotations

from typing import Any

import orjson

from . import attrs as A
from .views import Usage
from .vocab import MAIN_AGENT


class Capture:
    """Prompt, argument and result text: exported only when the user opted in, cut to a length."""

    __slots__ = ("enabled", "max_chars")

    def __init__(self, enabled: bool, max_chars: int) -> None:
        self.enabled = enabled
        self.max_chars = max_chars

    def text(self, value: Any) -> str | None:
        """The text to export for ``value``, or None (capture off, or nothing there)."""
        if not self.enabled or value is None:
            return None
        text = value if isinstance(value, str) else to_json(value)
        return text[: self.max_chars]


def to_json(value: Any) -> str:
    """Compact JSON of any value (content capture of non-string fields)."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return str(value)


def base(operation: str, session_id: str) -> dict[str, Any]:
    """The attributes every GenAI span starts with."""
    return {
        A.GEN_AI_OPERATION_NAME: operation,
        A.GEN_AI_PROVIDER_NAME: A.PROVIDER,
        A.GEN_AI_CONVERSATION_ID: session_id,
    }


def interaction(session_id: str, interaction_id: str, *, model: str | None, cwd: str | None,
                cli_version: str | None, prompt: str | None) -> dict[str, Any]:
    """The invoke_agent root of one interaction."""
    attributes = base(A.OP_INVOKE_AGENT, session_id)
    attributes[A.GEN_AI_AGENT_NAME] = A.AGENT_NAME
    attributes[A.COPILOT_INTERACTION_ID] = interaction_id
    if model:
        attributes[A.GEN_AI_REQUEST_MODEL] = model
    if cwd:
        attributes[A.COPILOT_CWD] = cwd
    if cli_version:
        attributes[A.COPILOT_CLI_VERSION] = cli_version
    if prompt is not None:
        attributes[A.GEN_AI_INPUT_MESSAGES] = prompt
    return attributes


def turn(session_id: str, agent: str, turn_id: str, interaction_id: str, *, autopilot: bool) -> dict[str, Any]:
    """One turn of the main agent or of a sub-agent."""
    attributes = {
        A.GEN_AI_CONVERSATION_ID: session_id,
        A.GEN_AI_AGENT_NAME: A.AGENT_NAME if agent == MAIN_AGENT else agent,
        A.COPILOT_TURN_ID: turn_id,
        A.COPILOT_INTERACTION_ID: interaction_id,
    }
    if autopilot:
        attributes[A.COPILOT_AUTOPILOT_CONTINUATION] = True
    return attributes


def chat(session_id: str, agent: str, usage: Usage, model: str, turn_id: str | None) -> tuple[dict[str, Any],
                                                                                           dict[str, int]]:
    """One LLM call: its attributes, and its token counts by type (copilot_tokens_total{type})."""
    attributes = base(A.OP_CHAT, session_id)
    if agent != MAIN_AGENT:
        attributes[A.GEN_AI_AGENT_NAME] = agent
    fields = usage.fields
    attributes[A.GEN_AI_REQUEST_MODEL] = model
    attributes[A.GEN_AI_RESPONSE_MODEL] = model
    tokens = {}
    for key, attr, label in A.USAGE_TOKENS:
        value = fields.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attr] = int(value)
            tokens[label] = int(value)
    finish = fields.get("finishReason")
    if isinstance(finish, str):
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = (finish,)
    for key, attr in A.USAGE_EXTRAS:
        value = fields.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            attributes[attr] = value
    if turn_id is not None:
        attributes[A.COPILOT_TURN_ID] = turn_id
    return attributes, tokens


def tool(session_id: str, agent: str, name: str, call_id: str, arguments: str | None) -> dict[str, Any]:
    """One tool execution."""
    attributes = base(A.OP_EXECUTE_TOOL, session_id)
    attributes[A.GEN_AI_TOOL_NAME] = name
    attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    attributes[A.GEN_AI_TOOL_TYPE] = "function"
    if agent != MAIN_AGENT:
        attributes[A.GEN_AI_AGENT_NAME] = agent
    if arguments is not None:
        attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
    return attributes


def subagent(session_id: str, name: str, call_id: str) -> dict[str, Any]:
    """The invoke_agent span of a sub-agent, under the task call that spawned it."""
    attributes = base(A.OP_INVOKE_AGENT, session_id)
    attributes[A.GEN_AI_AGENT_NAME] = name
    attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    return attributes
