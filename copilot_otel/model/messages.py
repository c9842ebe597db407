"""Conversations as the GenAI conventions' JSON messages, built only with content capture on.

``gen_ai.input.messages`` and ``gen_ai.output.messages`` hold a JSON list of messages (a role and its parts),
``gen_ai.system_instructions`` a JSON list of parts. The parts used are ``text`` (content), ``tool_call`` (id,
name, arguments) and ``tool_call_response`` (id, response), as the real CLI writes them on its own spans:

- a chat span gets what its agent was told since its previous call (the prompt as the model got it, each
  tool's result or error, one ``tool`` message per call in the order the model asked for them), the agent's
  system prompt, and its answer (text and the tools it asked for) with the call's finish reason;
- an invoke_agent span gets its agent's prompt, system prompt and last answer.

Everything comes from the log: ``user.message`` (``transformedContent``, else ``content``), ``system.message``,
``assistant.message`` (``content``, ``toolRequests``) and ``tool.execution_complete`` (``result.content``, else
``error.message``). A call's answer is logged after its usage record, so its chat span waits for the answer: it
goes out with the agent's ``assistant.message``, or without an answer at the agent's next event.
"""

from __future__ import annotations

from typing import Any, cast

from . import attrs as A
from .open_spans import Talk
from .records import SpanRecord
from .spanattrs import Capture, to_json

ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL = "user", "assistant", "tool"
# A provider's finish reason (OpenAI's words) -> the conventions' (output messages' finish_reason)
_FINISH = {"tool_calls": "tool_call", "function_call": "tool_call", "content-filter": "content_filter"}


def text_part(text: str) -> dict:
    return {"type": "text", "content": text}


def finish_reason(raw: Any, asked_for_tools: bool) -> str:
    """The conventions' finish reason of a call the provider says ended for ``raw``."""
    if isinstance(raw, str) and raw:
        return _FINISH.get(raw, raw)
    return "tool_call" if asked_for_tools else "stop"


class Transcript:
    """Each agent's Talk, kept only with content capture on (else every method does nothing)."""

    def __init__(self, capture: Capture, send) -> None:
        self.capture = capture
        self.enabled = capture.enabled
        self._send = send  # where a chat span goes once its answer came (Outbox.span)

    def user(self, talk: Talk, text: Any, *, opening: bool) -> dict | None:
        """A user message the agent's next call gets (``opening``: the one that starts its invocation)."""
        content = self.capture.text(text)
        if not self.enabled or not content:
            return None
        message = {"role": ROLE_USER, "parts": [text_part(content)]}
        talk.pending.append(message)
        if opening:
            talk.prompt, talk.answer = message, None
        return message

    def system(self, talk: Talk, text: Any) -> None:
        """The agent's system prompt (system.message)."""
        content = self.capture.text(text)
        if content:
            talk.system = to_json([text_part(content)])

    def tool_done(self, talk: Talk, call_id: str, result: Any, error: Any) -> None:
        """A tool the agent asked for completed: its result (or error) goes to the agent's next call."""
        if not self.enabled:
            return
        response = self.capture.text(result_text(result) if error is None else error)
        talk.pending.append({"role": ROLE_TOOL, "parts": [{"type": "tool_call_response", "id": call_id,
                                                           "response": response or ""}]})

    def chat(self, talk: Talk, attributes: dict[str, Any]) -> None:
        """A call: what it was given (since the previous one, in the order the model asked for the tools)."""
        if not self.enabled:
            return
        if talk.pending:
            order, last = talk.order, len(talk.order)
            pending = sorted(talk.pending, key=lambda m: order.get(m["parts"][0].get("id"), last)
                             if m["role"] == ROLE_TOOL else -1)
            attributes[A.GEN_AI_INPUT_MESSAGES] = to_json(pending)
            talk.pending = []
        if talk.system is not None:
            attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS] = talk.system

    def hold(self, talk: Talk, record: SpanRecord) -> bool:
        """Keep a chat span until its answer comes; False (nothing kept) with capture off."""
        if not self.enabled:
            return False
        self.release(talk)
        talk.held = record
        return True

    def answered(self, talk: Talk, content: Any, requests: Any) -> None:
        """assistant.message: the answer of the agent's last call, on its chat span, which goes now."""
        if not self.enabled:
            return
        parts = []
        text = self.capture.text(content)
        if text:
            parts.append(text_part(text))
        talk.order = {}
        for request in requests if isinstance(requests, list) else ():
            if isinstance(request, dict):
                call_id = request.get("toolCallId")
                parts.append({"type": "tool_call", "id": call_id, "name": str(request.get("name") or "unknown"),
                              "arguments": self.capture.value(request.get("arguments"))})
                if isinstance(call_id, str):
                    talk.order[call_id] = len(talk.order)
        if not parts:
            return
        held = talk.held
        raw = held.attributes.get(A.GEN_AI_RESPONSE_FINISH_REASONS) if held is not None else None
        message = {"role": ROLE_ASSISTANT, "parts": parts,
                   "finish_reason": finish_reason(raw[0] if raw else None, bool(talk.order))}
        talk.answer = message
        if held is not None:
            cast("dict[str, Any]", held.attributes)[A.GEN_AI_OUTPUT_MESSAGES] = to_json([message])  # held: not out yet
            self.release(talk)

    def release(self, talk: Talk | None) -> None:
        """Send the agent's chat span that still waits for its answer (none will come now)."""
        if talk is not None and talk.held is not None:
            held, talk.held = talk.held, None
            self._send(held)

    def invocation(self, talk: Talk, attributes: dict[str, Any], *, prompt: bool = True) -> None:
        """An invoke_agent span's prompt, system prompt and the agent's last answer."""
        if not self.enabled:
            return
        if prompt and talk.prompt is not None:
            attributes[A.GEN_AI_INPUT_MESSAGES] = to_json([talk.prompt])
        if talk.system is not None:
            attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS] = talk.system
        if talk.answer is not None:
            attributes[A.GEN_AI_OUTPUT_MESSAGES] = to_json([talk.answer])


def result_text(result: Any) -> Any:
    """A tool's result as the CLI gives it to the model: ``result.content`` (the rest of the object otherwise)."""
    if isinstance(result, dict) and isinstance(result.get("content"), str):
        return result["content"]
    return result
