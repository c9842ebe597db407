"""A GenAI backend renders the conversation: a real Arize Phoenix receives a replay over OTLP http/protobuf.

The session is the real CLI 1.0.102's (tests/fixtures/cli/1.0.102/capture_subagent): a prompt, a ``task`` call
whose sub-agent runs ``bash``, and the answer. Replayed with content capture on, Phoenix (which turns the
GenAI conventions' attributes into its own on ingest) stores each call's messages and each tool's arguments and
result, and its trace view in Chromium shows the prompt, the answer and each tool call with its arguments and
result. The same session replayed with capture off (as another session, into another project) leaves none of
that content in Phoenix: not in what its API returns, not on its page.

Phoenix is started once for the module (tests/support/phoenix.py): it takes about 25 s of CPU to start.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support.browser import screenshot
from tests.support.commands import run_replay
from tests.support.phoenix import PROJECT_RESOURCE, Phoenix
from tests.support.provider import CHILD_ECHO

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102" / "capture_subagent"
PROMPT = "[scenario:subagent] Please do the scripted task."
ANSWER = "The sub-agent finished."
CHILD_PROMPT = "[scenario:subagent-child] Please echo a greeting."
CHILD_ANSWER = "Sub-agent done: greeted."
COMMAND = f"echo {CHILD_ECHO}"
# Every piece of the session's content: none of it may reach Phoenix with capture off.
CONTENT = (PROMPT, ANSWER, CHILD_PROMPT, CHILD_ANSWER, COMMAND, f"{CHILD_ECHO}\n", "system prompt trimmed")
ON, OFF = "capture-on", "capture-off"
SPANS = 12  # the root, its 2 turns and 2 calls, the task call, the sub-agent, its 2 turns, 2 calls and bash
PAGE_TIMEOUT = 180_000  # ms: Phoenix's page is a large single-page app, slow on a loaded 2-core machine


def replay(phoenix: Phoenix, home: Path, project: str, tmp: Path, *, capture: bool) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_RESOURCE_ATTRIBUTES": f"{PROJECT_RESOURCE}={project}"}
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    result = run_replay(str(home), "--state-dir", str(tmp / f"state-{project}"), env=env)
    assert result.returncode == 0, result.stderr.decode()


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    """One Phoenix holding the session twice: with capture on (project capture-on) and, as a copy with another
    session id, with capture off (project capture-off)."""
    tmp = tmp_path_factory.mktemp("phoenix")
    (session,) = (FIXTURE / "session-state").iterdir()
    off_home = tmp / "off-home"
    shutil.copytree(session, off_home / "session-state" / str(uuid.uuid4()))
    with Phoenix(tmp / "phoenix") as server:
        print(f"Phoenix started in {server.started_in:.1f} s")
        replay(server, FIXTURE, ON, tmp, capture=True)
        replay(server, off_home, OFF, tmp, capture=False)
        for project in (ON, OFF):
            server.wait_for_spans(project, SPANS)
        yield server


def named(spans: list[dict], name: str) -> list[dict]:
    return sorted((s for s in spans if s["name"] == name), key=lambda s: s["start_time"])


def test_phoenix_stores_the_conversation(phoenix):
    """Phoenix read the messages: each chat span has its input and output messages (the system prompt, the
    prompt as the user's, the tool results as tool messages, the task call as a tool call with its arguments),
    each tool span its parameters and output."""
    spans = phoenix.spans(ON)
    assert len(spans) == len(phoenix.spans(OFF)) == SPANS
    chats = [s["attributes"] for s in named(spans, "chat test-model")]
    first_in, first_out = values(chats[0], "llm.input_messages."), values(chats[0], "llm.output_messages.")
    assert "system" in first_in and "user" in first_in and any(PROMPT in text for text in first_in)
    assert "task" in first_out and any(CHILD_PROMPT in text for text in first_out)
    assert CHILD_ANSWER in values(chats[-1], "llm.input_messages.")
    assert ANSWER in values(chats[-1], "llm.output_messages.")
    (bash,) = named(spans, "execute_tool bash")
    assert bash["attributes"]["tool.parameters.command"] == COMMAND
    assert bash["attributes"]["output.value"].startswith(f"{CHILD_ECHO}\n")


def values(attributes: dict, prefix: str) -> list[str]:
    """The values of the attributes whose key starts with ``prefix``, as text."""
    return [str(value) for key, value in attributes.items() if key.startswith(prefix)]


def detail(page) -> str:
    """The text of the selected span's pane (from its Info tab on)."""
    text = page.inner_text("body")
    return text[text.find("\nInfo\n"):]


def open_span(page, phoenix: Phoenix, project: str, span: dict, ready: str) -> str:
    page.goto(phoenix.span_url(project, span), wait_until="commit", timeout=PAGE_TIMEOUT)
    page.get_by_text(ready, exact=False).first.wait_for(timeout=PAGE_TIMEOUT)
    return detail(page)


def test_the_trace_view_shows_prompt_answer_and_tool_calls(phoenix, browser):
    """In Chromium, the trace view of the capture-on replay: the first call shows the prompt and the task call
    with its arguments, the last the task's result and the answer; the task and bash spans show their
    parameters and their output."""
    spans = phoenix.spans(ON)
    first, *_, last = named(spans, "chat test-model")
    page = browser.page()  # the run's one Chromium: a second sync Playwright cannot start beside it
    shown = open_span(page, phoenix, ON, first, "Messages")
    assert PROMPT in shown and "task" in shown and CHILD_PROMPT in shown, shown
    screenshot(page, "phoenix-first-call")
    shown = open_span(page, phoenix, ON, last, "Tool Result")
    assert CHILD_ANSWER in shown and ANSWER in shown, shown
    screenshot(page, "phoenix-answer")
    (task,) = named(spans, "execute_tool task")
    shown = open_span(page, phoenix, ON, task, "Parameters")
    assert CHILD_PROMPT in shown and CHILD_ANSWER in shown, shown
    (bash,) = named(spans, "execute_tool bash")
    shown = open_span(page, phoenix, ON, bash, "Parameters")
    assert COMMAND in shown and f"{CHILD_ECHO}\n" in shown, shown
    screenshot(page, "phoenix-tool")
    assert not page.errors or all("fetch" in e for e in page.errors), page.errors


def test_with_capture_off_no_content_reaches_phoenix(phoenix, browser):
    """The capture-off replay: the same spans, and none of the session's content in what Phoenix stored
    (every attribute of every span), nor on the trace view of its first call and of its bash tool."""
    spans = phoenix.spans(OFF)
    stored = json.dumps([s["attributes"] for s in spans])
    assert not [text for text in CONTENT if text in stored]
    assert "input_messages" not in stored and "output_messages" not in stored and "parameters" not in stored
    first = named(spans, "chat test-model")[0]
    (bash,) = named(spans, "execute_tool bash")
    page = browser.page()  # the run's one Chromium
    for span in (first, bash):
        shown = open_span(page, phoenix, OFF, span, span["name"])
        page.get_by_text("Attributes").first.wait_for(timeout=PAGE_TIMEOUT)
        assert not [text for text in CONTENT if text in page.inner_text("body")], shown
