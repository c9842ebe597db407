"""With content capture on, copilot-otel writes the conversation as the real CLI's own OTel does, in the GenAI
conventions' JSON messages.

The fixtures (tests/fixtures/cli/1.0.102/capture_*) hold a session the real CLI 1.0.102 ran with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true and the OTel it exported itself (otel.jsonl). Replayed
with capture on, wherever the CLI wrote a content attribute copilot-otel writes the same one, with the same
messages: chat spans by their response id, tool spans by their call id, interaction roots and sub-agents in
order. The one difference is required by the conventions: an output message has a ``finish_reason`` (the CLI
leaves it out, and Arize Phoenix then drops the whole attribute). Every message validates against the
conventions' schemas (tests/fixtures/semconv).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from copilot_otel.config import ModelOptions
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model import attrs as A
from copilot_otel.replay.runner import replay_files
from copilot_otel.source.sources import resolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCENARIOS = ("capture_subagent", "capture_failing_tool", "capture_autopilot")
CAPTURE = ModelOptions(capture_content=True, content_max_chars=100_000)  # the fixtures cut long texts already
SCHEMAS = {A.GEN_AI_INPUT_MESSAGES: "gen-ai-input-messages.json",
           A.GEN_AI_OUTPUT_MESSAGES: "gen-ai-output-messages.json",
           A.GEN_AI_SYSTEM_INSTRUCTIONS: "gen-ai-system-instructions.json"}
MESSAGES = tuple(SCHEMAS)
TOOL_CONTENT = (A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT)
CONTENT = MESSAGES + TOOL_CONTENT


def the_cli_spans(scenario: str) -> list[dict]:
    """The spans the CLI exported itself, in the order it started them."""
    lines = (FIXTURES / "cli" / "1.0.102" / scenario / "otel.jsonl").read_text().splitlines()
    spans = [record for record in map(json.loads, lines) if record.get("type") == "span"]
    return sorted(spans, key=lambda s: tuple(s["startTime"]))


def our_spans(scenario: str, options: ModelOptions = CAPTURE) -> list:
    sink = MemorySink()
    replay_files(resolve([FIXTURES / "cli" / "1.0.102" / scenario]), sink, options=options)
    return sorted(sink.records, key=lambda s: s.start_ns)


def decoded(key: str, value):
    """A content attribute as compared: messages parsed, an output message without its finish reason."""
    if key == A.GEN_AI_TOOL_CALL_ARGUMENTS:
        return json.loads(value)
    if key not in MESSAGES:
        return value
    parsed = json.loads(value)
    if key == A.GEN_AI_OUTPUT_MESSAGES:
        return [{k: v for k, v in message.items() if k != "finish_reason"} for message in parsed]
    return parsed


def pairs(scenario: str) -> list[tuple[str, dict, dict]]:
    """(what, the CLI's attributes, ours) for each span the CLI wrote content on."""
    cli, ours = the_cli_spans(scenario), our_spans(scenario)
    chats = {s.attributes.get(A.GEN_AI_RESPONSE_ID): s for s in ours if s.name.startswith("chat ")}
    tools = {s.attributes.get(A.GEN_AI_TOOL_CALL_ID): s for s in ours if s.name.startswith("execute_tool ")}
    roots = [s for s in ours if s.parent_span_id is None]
    subagents = [s for s in ours if s.name.startswith("invoke_agent ") and s.parent_span_id is not None]
    cli_roots = [s for s in cli if "parentSpanId" not in s and s["name"] == "invoke_agent"]
    cli_subagents = [s for s in cli if s["name"].startswith("invoke_agent ")]
    assert len(roots) == len(cli_roots) and len(subagents) == len(cli_subagents)
    found = []
    for span in cli:
        attributes = span["attributes"]
        operation = attributes.get(A.GEN_AI_OPERATION_NAME)
        if operation == "chat":
            mine = chats[attributes[A.GEN_AI_RESPONSE_ID]]
        elif operation == "execute_tool":
            mine = tools[attributes[A.GEN_AI_TOOL_CALL_ID]]
        elif span in cli_roots:
            mine = roots[cli_roots.index(span)]
        elif span in cli_subagents:
            mine = subagents[cli_subagents.index(span)]
        else:
            continue
        which = attributes.get(A.GEN_AI_RESPONSE_ID) or attributes.get(A.GEN_AI_TOOL_CALL_ID) or ""
        found.append((f"{span['name']} {which}",
                      attributes, dict(mine.attributes)))
    return found


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_content_is_where_and_what_the_cli_writes(scenario):
    """Every content attribute of the CLI's chat, tool, interaction and sub-agent spans is on the same span of
    ours, holding the same messages (roles, parts, ids, tool names and arguments, results, system prompt)."""
    compared = 0
    for what, cli, ours in pairs(scenario):
        for key in CONTENT:
            if key in cli:
                assert key in ours, (what, key)
                assert decoded(key, ours[key]) == decoded(key, cli[key]), (what, key)
                compared += 1
    assert compared >= 6


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_message_follows_the_conventions_schemas(scenario):
    """Each gen_ai.input.messages, gen_ai.output.messages and gen_ai.system_instructions is JSON valid against
    the conventions' schema; each output message has a finish reason of the conventions' words."""
    validators = {key: jsonschema.Draft202012Validator(json.loads((FIXTURES / "semconv" / name).read_text()))
                  for key, name in SCHEMAS.items()}
    seen = set()
    for span in our_spans(scenario):
        for key, validator in validators.items():
            if key in span.attributes:
                value = json.loads(span.attributes[key])
                validator.validate(value)
                seen.add(key)
                if key == A.GEN_AI_OUTPUT_MESSAGES:
                    assert {m["finish_reason"] for m in value} <= {"stop", "tool_call", "length", "content_filter"}
    assert seen == set(SCHEMAS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_content_without_capture(scenario):
    """The same logs replayed with capture off: no content attribute on any span."""
    for span in our_spans(scenario, ModelOptions()):
        assert not set(CONTENT) & set(span.attributes), span.name
