"""A scripted OpenAI-compatible chat-completions server for driving the real Copilot CLI.

The Copilot CLI (``COPILOT_OFFLINE=true``, ``COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:<port>/v1``)
calls ``GET /v1/models`` and streams ``POST /v1/chat/completions`` (a request with
``"stream": false`` gets one ``chat.completion`` object instead; so does one without
``"stream"`` where ``stream_by_default`` is off). This server answers
those calls from a *script*, so the CLI performs real tool calls, spawns real sub-agents,
gets real HTTP errors, ... and writes a real ``events.jsonl``.

Which script runs is chosen by a marker in the conversation: ``[scenario:<name>]`` or
``[scenario:<name>:<arg>]`` anywhere in a user message. The *last* user message that holds
a marker starts the current interaction; the reply is decided only from the messages after
it (how many assistant turns, tool results and autopilot nudges there already are). So the
reply to a request depends only on the request, never on timing or on other requests, and
one server can serve any number of concurrent CLI runs.

    with ScriptedProvider() as provider:
        run_cli(prompt=prompt_for("plain"), base_url=provider.base_url, ...)

Each scenario is a function ``(Ctx) -> Reply`` registered in ``SCENARIOS``. Every scripted
LLM call has its own, scenario-specific token usage (see ``usage_for``), so tests can
predict the exact numbers that must reach ``session.usage_record``.

How the server *delivers* a reply is a separate choice, a provider behaviour (``BEHAVIOURS``),
to imitate real providers: ``reuse_ids`` (one constant completion id for every call, as some
proxies do), ``id_pool`` (ids from a small pool, as Ollama's come from ~1,000 values),
``small_chunks`` (content and tool-call arguments streamed over many small SSE chunks) and
``throttle`` (HTTP 429 with ``retry-after`` for the first attempt of each request, then the
reply). A ``[provider:<name>]`` (or ``[provider:<name>:<n>]``) marker in any user message
picks it for that conversation; else the server's own default
(``ScriptedProvider(behaviour=...)``), else ``normal``. HTTP 500/400 errors stay scenarios
(``provider_error``, ``provider_bad_request``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

MODEL = "test-model"
THREAD_PREFIX = "scripted-provider"  # names of the server's threads (serving + per request)

MARKER_RE = re.compile(r"\[scenario:([A-Za-z0-9_\-]+)(?::([^\]\s]*))?\]")


def marker(name: str, arg: object | None = None) -> str:
    """The marker text that selects scenario ``name`` (optionally with an argument)."""
    return f"[scenario:{name}]" if arg is None else f"[scenario:{name}:{arg}]"


# ---------------------------------------------------------------------------------------
# Provider behaviours: how a reply is delivered (the scenario decides what it says).

BEHAVIOURS = ("normal", "reuse_ids", "id_pool", "small_chunks", "throttle")
BEHAVIOUR_RE = re.compile(r"\[provider:([a-z_]+)(?::(\d+))?\]")
REUSED_ID = "chatcmpl-reused"  # reuse_ids: the completion id of every call
ID_POOL_SIZE = 2  # id_pool: ids chatcmpl-pool-0 .. -<n-1> (marker argument overrides)
CHUNK_CHARS = 4  # small_chunks: characters of content / tool arguments per SSE chunk
THROTTLE_ATTEMPTS = 1  # throttle: attempts answered 429 before the reply (marker argument overrides)
THROTTLE_RETRY_AFTER = "1"  # throttle: the retry-after header (seconds)


def provider_marker(behaviour: str, arg: object | None = None) -> str:
    """The marker text that selects a provider behaviour for a conversation."""
    assert behaviour in BEHAVIOURS, behaviour
    return f"[provider:{behaviour}]" if arg is None else f"[provider:{behaviour}:{arg}]"


def behaviour_of(body: dict, default: str = "normal") -> tuple[str, int | None]:
    """The provider behaviour a request asks for (the last marker in its user messages)."""
    found = None
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            for mm in BEHAVIOUR_RE.finditer(_text(m.get("content"))):
                if mm.group(1) in BEHAVIOURS:
                    found = mm
    if found is None:
        return default, None
    return found.group(1), int(found.group(2)) if found.group(2) else None


def response_id(behaviour: str, arg: int | None, ctx: Ctx | None) -> str:
    """The completion id a behaviour gives a step (normal: completion_id)."""
    if behaviour == "reuse_ids":
        return REUSED_ID
    if ctx is None:
        return "chatcmpl-none"
    if behaviour == "id_pool":
        return f"chatcmpl-pool-{(ctx.interaction * 7 + ctx.step) % (arg or ID_POOL_SIZE)}"
    return completion_id(ctx.scenario, ctx.interaction, ctx.step)


def split(text: str, size: int = CHUNK_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# ---------------------------------------------------------------------------------------
# Replies


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens, as OpenAI counts them

    def as_openai(self) -> dict:
        u: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens:
            u["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        if self.reasoning_tokens:
            u["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return u


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    id: str = ""  # filled in by the server when empty


@dataclass(frozen=True)
class Reply:
    """One scripted answer to a chat-completions request."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None  # None: derived from the scenario and step (usage_for)
    http_status: int = 200  # != 200: answer with this HTTP error instead of a stream
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (e.g. retry-after)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


@dataclass
class Ctx:
    """What a scenario function knows about the request it answers."""

    scenario: str
    arg: str | None
    interaction: int  # 1-based count of user messages holding a marker (resume => 2)
    step: int  # assistant messages since the marker message: 0 for the first LLM call
    tool_results: list[dict]  # role=tool messages since the marker message
    nudges: int  # user messages (without marker) since the marker message
    tool_names: list[str]  # tools offered in the request
    body: dict = field(repr=False, default_factory=dict)


def usage_for(scenario: str, interaction: int, step: int) -> Usage:
    """Deterministic, scenario-specific token usage for one LLM call.

    Numbers differ by scenario, interaction and step, so a test that checks them cannot
    pass by accident (e.g. by taking the wrong record). ``cached_tokens`` is set on
    every call so cacheReadTokens is never just zero.
    """
    h = sum((i + 1) * ord(c) for i, c in enumerate(scenario)) % 97
    prompt = 1000 + 100 * h + 37 * step + 500 * (interaction - 1)
    completion = 11 + 3 * h % 40 + 7 * step
    cached = 100 + 13 * step + h
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type":"text","text":...}, ...]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


# ---------------------------------------------------------------------------------------
# Scenarios

Scenario = Callable[[Ctx], Reply]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str):
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = fn
        return fn

    return register


def bash(command: str, description: str = "run a command", **extra) -> ToolCall:
    return ToolCall("bash", {"command": command, "description": description, **extra})


# Constants the scripts use; tests compare the events against them.
PLAIN_ECHO = "hello-from-plain"
MULTI_ECHO = ("multi-one", "multi-two")
MULTI_VIEW_NAME = "multi_view.txt"  # the fixture creates it in the run's cwd
MULTI_VIEW_TEXT = "a file the multi_tools scenario views\n"
FAILING_MISSING_NAME = "missing-file.txt"  # never created: view fails "Path does not exist"
FAILING_DENIED_PATH = "/nonexistent/copilot-otel/outside-cwd.txt"  # outside cwd: permission denied
FAILING_EXIT_CODE = 3  # bash exiting non-zero is still success=true (exitCode 3)
CHILD_ECHO = "hello-from-subagent"
SUBAGENT_NAME = "scripted-helper"  # task(name=...) -> subagent.*.agentDisplayName
SUBAGENT_TYPE = "general-purpose"  # task(agent_type=...) -> subagent.*.agentName
TURN_ECHO = ("turn-one", "turn-two")
AUTOPILOT_NUDGES = 2
TASK_COMPLETE_SUMMARY = "Scripted autopilot task finished."
FINAL_ANSWER = "All done."
RESUME_ECHO = "hello-after-resume"


@scenario("plain")
def _plain(c: Ctx) -> Reply:
    """One bash call, then the answer (2 LLM calls, 2 turns)."""
    if c.step == 0:
        return Reply(tool_calls=(bash(f"echo {PLAIN_ECHO}", "say hello"),))
    return Reply(content=FINAL_ANSWER)


@scenario("multi_turn")
def _multi_turn(c: Ctx) -> Reply:
    """bash in turn 0, bash in turn 1, answer in turn 2."""
    if c.step < len(TURN_ECHO):
        return Reply(tool_calls=(bash(f"echo {TURN_ECHO[c.step]}", f"turn {c.step}"),))
    return Reply(content=FINAL_ANSWER)


def multi_tools_calls(cwd: str) -> tuple[ToolCall, ...]:
    return (
        bash(f"echo {MULTI_ECHO[0]}", "first echo"),
        bash(f"echo {MULTI_ECHO[1]}", "second echo"),
        ToolCall("view", {"path": f"{cwd.rstrip('/')}/{MULTI_VIEW_NAME}"}),
    )


@scenario("multi_tools")
def _multi_tools(c: Ctx) -> Reply:
    """Three tools in one turn (two bash, one view of an existing file), then the answer.
    arg: the run's cwd (absolute), which holds MULTI_VIEW_NAME."""
    if c.step == 0:
        return Reply(tool_calls=multi_tools_calls(c.arg or "/"))
    return Reply(content=FINAL_ANSWER)


def failing_tool_calls(cwd: str) -> tuple[ToolCall, ...]:
    """(call, expected success) in request order."""
    return (
        ToolCall("view", {"path": f"{cwd.rstrip('/')}/{FAILING_MISSING_NAME}"}),  # fails: no such file
        ToolCall("view", {"path": FAILING_DENIED_PATH}),  # fails: permission denied (unattended)
        bash(f"exit {FAILING_EXIT_CODE}", "exit non-zero"),  # success=true, exitCode=3
        bash("echo still-fine", "a tool that works"),  # success
    )


FAILING_EXPECTED_SUCCESS = (False, False, True, True)


@scenario("failing_tool")
def _failing_tool(c: Ctx) -> Reply:
    """Four tools in one turn: two fail (missing file; permission denied), two succeed
    (one of them with a non-zero exit code), then the answer. arg: the run's cwd."""
    if c.step == 0:
        return Reply(tool_calls=failing_tool_calls(c.arg or "/"))
    return Reply(content="Two tools failed, two worked.")


def task_call(child_scenario: str, text: str = "Please echo a greeting.") -> ToolCall:
    return ToolCall(
        "task",
        {
            "description": "Run helper task",
            "prompt": f"{marker(child_scenario)} {text}",
            "agent_type": SUBAGENT_TYPE,
            "name": SUBAGENT_NAME,
        },
    )


@scenario("subagent")
def _subagent(c: Ctx) -> Reply:
    """The main agent calls `task`; the sub-agent (subagent-child) runs bash and answers;
    then the main agent answers."""
    if c.step == 0:
        return Reply(tool_calls=(task_call("subagent-child"),))
    return Reply(content="The sub-agent finished.")


@scenario("subagent-child")
def _subagent_child(c: Ctx) -> Reply:
    if c.step == 0:
        return Reply(tool_calls=(bash(f"echo {CHILD_ECHO}", "child greeting"),))
    return Reply(content="Sub-agent done: greeted.")


@scenario("subagent_failed")
def _subagent_failed(c: Ctx) -> Reply:
    """The main agent calls `task`; the sub-agent's first LLM call gets HTTP 400 (not
    retried), so the sub-agent fails; then the main agent answers."""
    if c.step == 0:
        return Reply(tool_calls=(task_call("subagent-child-error", "This sub-agent will fail."),))
    return Reply(content="The sub-agent failed; giving up on it.")


@scenario("subagent-child-error")
def _subagent_child_error(c: Ctx) -> Reply:
    return Reply(http_status=400)


@scenario("autopilot")
def _autopilot(c: Ctx) -> Reply:
    """Run with --autopilot: answer without task_complete until nudged AUTOPILOT_NUDGES
    times, then call task_complete."""
    if c.nudges < AUTOPILOT_NUDGES:
        return Reply(content=f"Still working (answer {c.nudges + 1}).")
    return Reply(tool_calls=(ToolCall("task_complete", {"summary": TASK_COMPLETE_SUMMARY}),))


@scenario("provider_error")
def _provider_error(c: Ctx) -> Reply:
    """Every chat completion answers HTTP 500: the CLI retries 5 times (about 15 s of
    backoff, which no response header shortens), then writes session.error."""
    return Reply(http_status=500)


@scenario("provider_bad_request")
def _provider_bad_request(c: Ctx) -> Reply:
    """HTTP 400: not retried, session.error at once."""
    return Reply(http_status=400)


@scenario("tool_then_error")
def _tool_then_error(c: Ctx) -> Reply:
    """A bash call succeeds, then the next LLM call gets HTTP 400: session.error after a
    completed turn, mid-interaction."""
    if c.step == 0:
        return Reply(tool_calls=(bash("echo before-error", "works before the error"),))
    return Reply(http_status=400)


@scenario("sleep_tool")
def _sleep_tool(c: Ctx) -> Reply:
    """bash sleeps <arg> seconds (default 3), then the answer."""
    seconds = c.arg or "3"
    if c.step == 0:
        wait = max(30, int(float(seconds)) + 30)
        return Reply(tool_calls=(bash(f"sleep {seconds}; echo slept", "sleep a while", initial_wait=wait),))
    return Reply(content=f"Slept {seconds} seconds.")


@scenario("resume")
def _resume(c: Ctx) -> Reply:
    """The prompt of a resumed session (the first interaction ran `plain`)."""
    if c.step == 0:
        return Reply(tool_calls=(bash(f"echo {RESUME_ECHO}", "after resume"),))
    return Reply(content="Resumed and done.")


# edit_file (tests/e2e/test_cost.py): the agent changes code, so session.shutdown's codeChanges are not zero.
EDIT_FILE_NAME = "edit_me.txt"  # the test writes EDIT_FILE_TEXT there first
EDIT_FILE_TEXT = "one\ntwo\nthree\n"
EDIT_CREATED = ("created-1.txt", "created-2.txt", "created-3.txt")


@scenario("edit_file")
def _edit_file(c: Ctx) -> Reply:
    """`edit` replaces a line of EDIT_FILE_NAME with two, `create` writes a new three-line file, then the
    answer; the n-th interaction (a resume) edits the n-th line and creates the n-th file. arg: the cwd."""
    cwd, n = (c.arg or "/").rstrip("/"), c.interaction
    line = EDIT_FILE_TEXT.splitlines()[(n - 1) % 3]
    if c.step == 0:
        return Reply(tool_calls=(ToolCall("edit", {"path": f"{cwd}/{EDIT_FILE_NAME}", "old_str": line,
                                                   "new_str": f"{line} (edited)\nadded after {line}"}),))
    if c.step == 1:
        return Reply(tool_calls=(ToolCall("create", {"path": f"{cwd}/{EDIT_CREATED[(n - 1) % 3]}",
                                                     "file_text": "alpha\nbeta\ngamma\n"}),))
    return Reply(content=FINAL_ANSWER)


# echo_secret (added for tests/e2e/test_privacy.py): a secret reaches every content field.
SECRET_FILLER = " and so on" * 500  # pads the final answer past the default 4096-char capture limit


def echo_secret_answer(secret: str) -> str:
    """The final answer of echo_secret: the secret, then filler (5000+ characters)."""
    return f"The secret is {secret}.{SECRET_FILLER}"


@scenario("echo_secret")
def _echo_secret(c: Ctx) -> Reply:
    """Run with --autopilot; arg: a secret. bash echoes it (arguments and result), a view of a
    missing file named after it fails, a sub-agent is asked to echo it (its prompt, arguments,
    result and answer), the answer repeats it; after the nudge, task_complete's summary holds it."""
    secret = c.arg or "no-secret"
    if c.nudges == 0:
        if c.step == 0:
            return Reply(content=f"Echoing {secret}.", tool_calls=(
                bash(f"echo {secret}", f"echo {secret}"),
                ToolCall("view", {"path": f"/nonexistent/{secret}.txt"}),
            ))
        if c.step == 1:
            return Reply(tool_calls=(ToolCall("task", {
                "description": f"echo {secret}",
                "prompt": f"{marker('echo_secret_child', secret)} Echo {secret}.",
                "agent_type": SUBAGENT_TYPE,
                "name": SUBAGENT_NAME,
            }),))
        return Reply(content=echo_secret_answer(secret))
    return Reply(tool_calls=(ToolCall("task_complete", {"summary": f"Echoed {secret}."}),))


@scenario("echo_secret_child")
def _echo_secret_child(c: Ctx) -> Reply:
    """The sub-agent of echo_secret: echo the secret, then answer with it."""
    secret = c.arg or "no-secret"
    if c.step == 0:
        return Reply(tool_calls=(bash(f"echo child-{secret}", f"child echoes {secret}"),))
    return Reply(content=f"Sub-agent echoed {secret}.")


# ---------------------------------------------------------------------------------------
# Situations (tests/fixtures/record_situations.py records them): cut-off tools and sub-agents,
# background shells, odd answers, parallel sub-agents, huge and many tool results.


@dataclass(frozen=True)
class FinishReply(Reply):
    """A reply with a finish_reason of its own (e.g. "length")."""

    finish: str = "length"

    @property
    def finish_reason(self) -> str:
        return self.finish


LARGE_OUTPUT_BYTES = 1_000_000
MANY_TOOLS = 50  # sit_many_tools: every fifth call views a file outside the cwd, denied unattended


def sit_task(child: str, arg: object, name: str = SUBAGENT_NAME) -> ToolCall:
    """A `task` call whose sub-agent runs scenario ``child`` with ``arg``."""
    return ToolCall("task", {"description": f"Run {name}", "prompt": f"{marker(child, arg)} Do the child task.",
                             "agent_type": SUBAGENT_TYPE, "name": name})


@scenario("sit_child")
def _sit_child(c: Ctx) -> Reply:
    """A sub-agent: bash sleeps, then answers. arg: <tag>-<seconds> (the tag names its tool call)."""
    tag, _, seconds = (c.arg or "child-1").rpartition("-")
    if c.step == 0:
        return Reply(tool_calls=(ToolCall("bash", {"command": f"sleep {seconds}; echo {tag}",
                                                   "description": f"{tag} sleeps",
                                                   "initial_wait": int(seconds) + 30}, f"call_sit_child_{tag}"),))
    return Reply(content=f"Sub-agent {tag} done.")


@scenario("sit_task_sleep")
def _sit_task_sleep(c: Ctx) -> Reply:
    """A sub-agent whose bash sleeps <arg> seconds (default 120): to be cut off."""
    if c.step == 0:
        return Reply(tool_calls=(sit_task("sit_child", f"sub-{c.arg or 120}"),))
    return Reply(content="The sub-agent finished.")


@scenario("sit_parallel_tasks")
def _sit_parallel_tasks(c: Ctx) -> Reply:
    """<arg> (default 3) `task` calls in one turn; each sub-agent sleeps 2 s in bash."""
    if c.step == 0:
        return Reply(tool_calls=tuple(sit_task("sit_child", f"p{i}-2", f"helper-{i}") for i in range(int(c.arg or 3))))
    return Reply(content="All sub-agents finished.")


@scenario("sit_bg_shell")
def _sit_bg_shell(c: Ctx) -> Reply:
    """bash in async mode (sleeps <arg> s, default 5), then the answer; when the shell's
    completion comes back (the CLI reads it itself), one more answer."""
    if c.step == 0:
        return Reply(tool_calls=(bash(f"sleep {c.arg or 5}; echo bg-done", "background sleep", mode="async",
                                      shellId="bg"),))
    if c.step == 1:
        return Reply(content="Started it in the background.")
    return Reply(content="The background shell finished.")


@scenario("sit_slow")
def _sit_slow(c: Ctx) -> Reply:
    """The first LLM call is held <arg> seconds (default 5), then answers; a later call (after a
    message typed meanwhile) answers at once."""
    if c.step == 0:
        time.sleep(float(c.arg or 5))  # the scenario: a provider that takes this long
        return Reply(content="First answer, after a slow start.")
    return Reply(content="Done after a slow start.")


@scenario("sit_empty")
def _sit_empty(c: Ctx) -> Reply:
    """An empty completion: no content, no tool calls."""
    return Reply()


@scenario("sit_length")
def _sit_length(c: Ctx) -> Reply:
    """The first <arg> completions (default: all) are cut off by the output limit
    (finish_reason "length"); then a normal answer."""
    if c.arg is None or c.step < int(c.arg):
        return FinishReply(content="This answer was cut off at the tok")
    return Reply(content="ens limit; here is the rest of the answer.")


@scenario("sit_large_output")
def _sit_large_output(c: Ctx) -> Reply:
    """bash prints about LARGE_OUTPUT_BYTES, then the answer."""
    if c.step == 0:
        return Reply(tool_calls=(bash(f"yes 0123456789abcdef | head -c {LARGE_OUTPUT_BYTES}", "print a megabyte"),))
    return Reply(content="That was a lot of output.")


@scenario("sit_many_tools")
def _sit_many_tools(c: Ctx) -> Reply:
    """<arg> (default MANY_TOOLS) tools in one turn: every fifth views a file outside the cwd (fails:
    permission denied, nobody to ask), the others echo; then the answer."""
    if c.step == 0:
        return Reply(tool_calls=tuple(
            ToolCall("view", {"path": f"/nonexistent/many-{i}.txt"}) if i % 5 == 4 else bash(f"echo many-{i}",
                                                                                             f"echo {i}")
            for i in range(int(c.arg or MANY_TOOLS))))
    return Reply(content="Ran them all.")


COMPACTION_PROMPT = "Please create a detailed summary of the conversation so far."  # how the CLI's request starts


def is_compaction_request(body: dict) -> bool:
    """A compaction request: tool_choice "none" and a last user message asking for a summary."""
    msgs = body.get("messages") or []
    return (body.get("tool_choice") == "none" and bool(msgs)
            and _text(msgs[-1].get("content")).startswith(COMPACTION_PROMPT))


@scenario("sit_compact")
def _sit_compact(c: Ctx) -> Reply:
    """<arg> (default 6) turns, each a bash printing 2,000 characters, then the answer: with a
    small COPILOT_PROVIDER_MAX_PROMPT_TOKENS the CLI compacts the history. Progress is read
    from the "compact-N" outputs (or the summary naming the last one): compaction drops turns."""
    done = [int(n) for m in c.body.get("messages") or [] for n in re.findall(r"compact-(\d+)", _text(m.get("content")))]
    last = max(done, default=-1)
    if is_compaction_request(c.body):
        return Reply(content=f"<overview>Printing screenfuls; the last one was compact-{last}.</overview>")
    if last + 1 < int(c.arg or 6):
        n = last + 1  # explicit call ids: the step count restarts after a compaction
        return Reply(tool_calls=(ToolCall("bash", {"command": f"yes compact-{n} | head -c 2000",
                                                   "description": f"print a screenful ({n})"},
                                          f"call_sit_compact_{n}"),))
    return Reply(content="Printed them all.")


# Today's CLI, whole (tests/fixtures/record_situations.py): background and custom sub-agents, hooks,
# skills, MCP tools, reasoning tokens.

BG_CHILD_SECONDS = 6  # sit_bg_task:after: the background sub-agent outlives the main loop
BG_MAIN_SECONDS = 12  # sit_bg_task:before: the main loop outlives the background sub-agent
CUSTOM_AGENT = "reviewer"  # .github/agents/reviewer.agent.md, written by the recorder
SKILL_NAME = "greeter"  # .github/skills/greeter/SKILL.md, written by the recorder
HOOK_DENIED_ECHO = "forbidden-by-hook"  # the preToolUse hook denies a bash command holding this
REASONING_USAGE = Usage(prompt_tokens=2400, completion_tokens=300, cached_tokens=1200, reasoning_tokens=180)


@scenario("sit_bg_task")
def _sit_bg_task(c: Ctx) -> Reply:
    """A `task` in background mode. arg "after": the sub-agent sleeps BG_CHILD_SECONDS and the main agent
    answers at once (the sub-agent ends after the main loop); "before": the sub-agent ends at once and the main
    agent's bash sleeps BG_MAIN_SECONDS before it answers. Every later call answers."""
    if c.step == 0:
        seconds = BG_CHILD_SECONDS if c.arg == "after" else 0
        prompt = f"{marker('sit_child', f'bg-{seconds}')} Do the child task."
        return Reply(tool_calls=(ToolCall("task", {"description": "Background helper", "prompt": prompt,
                                                   "agent_type": SUBAGENT_TYPE, "name": "bg-helper",
                                                   "mode": "background"}),))
    if c.step == 1 and c.arg == "before":
        return Reply(tool_calls=(bash(f"sleep {BG_MAIN_SECONDS}; echo main-done", "main sleeps",
                                      initial_wait=BG_MAIN_SECONDS + 30),))
    if c.step == 1 or (c.step == 2 and c.arg == "before"):
        return Reply(content="The main loop is done.")
    return Reply(content="The background helper finished.")


@scenario("sit_custom_task")
def _sit_custom_task(c: Ctx) -> Reply:
    """A `task` call whose sub-agent is the custom agent CUSTOM_AGENT (it runs subagent-child), then the answer."""
    if c.step == 0:
        prompt = f"{marker('subagent-child')} Echo a greeting."
        return Reply(tool_calls=(ToolCall("task", {"description": "Review it", "prompt": prompt,
                                                   "agent_type": CUSTOM_AGENT, "name": "my-reviewer"}),))
    return Reply(content="The reviewer finished.")


@scenario("sit_hooks")
def _sit_hooks(c: Ctx) -> Reply:
    """Two bash calls, one of which a preToolUse hook denies, then a sub-agent, then an answer (which an
    agentStop hook blocks twice: each block asks again, and each time the answer is the same)."""
    if c.step == 0:
        return Reply(tool_calls=(bash("echo allowed-by-hook", "allowed"), bash(f"echo {HOOK_DENIED_ECHO}", "denied")))
    if c.step == 1:
        return Reply(tool_calls=(task_call("subagent-child"),))
    return Reply(content="Hooks ran.")


@scenario("sit_skill")
def _sit_skill(c: Ctx) -> Reply:
    """The `skill` tool loads SKILL_NAME, then a bash call, then the answer."""
    if c.step == 0:
        return Reply(tool_calls=(ToolCall("skill", {"skill": SKILL_NAME}),))
    if c.step == 1:
        return Reply(tool_calls=(bash("echo greeted", "greet as the skill says"),))
    return Reply(content="Greeted with the skill.")


@scenario("sit_mcp")
def _sit_mcp(c: Ctx) -> Reply:
    """The MCP tools of tests/support/mcp_server.py (server "probe"): one that works, one that errors, one
    that outlives the call's timeout, and one that kills its server mid-call; one per turn, then the answer."""
    order = [n for n in ("probe-echo", "probe-fail", "probe-slow", "probe-crash") if n in c.tool_names]
    if c.step < len(order):
        return Reply(tool_calls=(ToolCall(order[c.step], {"text": f"call {c.step}"}),))
    return Reply(content=f"MCP tools ran ({len(order)} of them).")


@scenario("sit_reasoning")
def _sit_reasoning(c: Ctx) -> Reply:
    """A bash call, then the answer; every call reports reasoning and cached tokens (REASONING_USAGE, step-shifted)."""
    usage = replace(REASONING_USAGE, reasoning_tokens=REASONING_USAGE.reasoning_tokens + 10 * c.step)
    if c.step == 0:
        return Reply(tool_calls=(bash("echo thought-about-it", "after thinking"),), usage=usage)
    return Reply(content="Thought it through.", usage=usage)


# ---------------------------------------------------------------------------------------
# Request analysis


def analyse(body: dict) -> Ctx | None:
    """Find the scenario and progress of a chat-completions request (None: no marker)."""
    msgs = body.get("messages") or []
    start = 0
    found = None
    interaction = 0
    for i, m in enumerate(msgs):
        if m.get("role") != "user":
            continue
        mm = MARKER_RE.search(_text(m.get("content")))
        if mm:
            start, found = i, mm
            interaction += 1
    if found is None:
        return None
    after = msgs[start + 1 :]
    tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    return Ctx(
        scenario=found.group(1),
        arg=found.group(2),
        interaction=interaction,
        step=sum(1 for m in after if m.get("role") == "assistant"),
        tool_results=[m for m in after if m.get("role") == "tool"],
        nudges=sum(1 for m in after if m.get("role") == "user"),
        tool_names=tools,
        body=body,
    )


def decide(body: dict) -> tuple[Ctx | None, Reply]:
    """The scripted reply to one chat-completions request body."""
    ctx = analyse(body)
    if ctx is None:
        return None, Reply(content="No scenario marker found.", usage=Usage(1, 1))
    fn = SCENARIOS.get(ctx.scenario)
    if fn is None:
        return ctx, Reply(content=f"Unknown scenario {ctx.scenario!r}.", usage=Usage(1, 1))
    reply = fn(ctx)
    calls = tuple(
        tc if tc.id else ToolCall(tc.name, tc.arguments, tool_call_id(ctx.scenario, ctx.interaction, ctx.step, i))
        for i, tc in enumerate(reply.tool_calls)
    )
    return ctx, replace(
        reply,
        tool_calls=calls,
        usage=reply.usage or usage_for(ctx.scenario, ctx.interaction, ctx.step),
    )


def completion_id(scenario: str, interaction: int, step: int) -> str:
    """The completion id of a step; the CLI records it as usage_record.usage.apiCallId
    and assistant.message.apiCallId."""
    return f"chatcmpl-{scenario}-{interaction}-{step}"


def parse_completion_id(api_call_id: str) -> tuple[str, int, int]:
    """Inverse of completion_id: (scenario, interaction, step)."""
    head, interaction, step = api_call_id.removeprefix("chatcmpl-").rsplit("-", 2)
    return head, int(interaction), int(step)


def tool_call_id(scenario: str, interaction: int, step: int, index: int) -> str:
    """The id the server gives the index-th tool call of a step (deterministic)."""
    return f"call_{scenario}_{interaction}_{step}_{index}"


# ---------------------------------------------------------------------------------------
# Server


@dataclass
class Served:
    """One request the server answered (for debugging and for tests)."""

    path: str
    scenario: str | None
    arg: str | None
    interaction: int
    step: int
    status: int
    usage: Usage | None
    tool_calls: tuple[ToolCall, ...]
    body: dict = field(repr=False)
    behaviour: str = "normal"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, obj: dict, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                         "owned_by": "copilot-otel-tests"}]})
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            self._json(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        ctx, reply = decide(body)
        behaviour, barg = behaviour_of(body, self.server.owner.behaviour)
        if behaviour == "throttle" and reply.http_status == 200 and self.server.owner._throttled(body, barg
                                                                                                 or THROTTLE_ATTEMPTS):
            reply = replace(reply, http_status=429, headers=(("retry-after", THROTTLE_RETRY_AFTER),))
        self.server.owner._record(
            Served(
                path=self.path,
                scenario=ctx.scenario if ctx else None,
                arg=ctx.arg if ctx else None,
                interaction=ctx.interaction if ctx else 0,
                step=ctx.step if ctx else 0,
                status=reply.http_status,
                usage=reply.usage,
                tool_calls=reply.tool_calls,
                body=body,
                behaviour=behaviour,
            )
        )
        if reply.http_status != 200:
            self._json(
                reply.http_status,
                {"error": {"message": f"scripted HTTP {reply.http_status}", "type": "server_error", "code": None}},
                reply.headers,
            )
            return
        if not body.get("stream", self.server.owner.stream_by_default):  # 0.0.x CLIs' sub-agents ask without "stream"
            self._complete(body.get("model") or MODEL, reply, ctx, behaviour, barg)
            return
        self._stream(body.get("model") or MODEL, reply, ctx, behaviour, barg)

    def _complete(self, model: str, reply: Reply, ctx: Ctx | None, behaviour: str = "normal",
                  barg: int | None = None) -> None:
        """The reply as one non-streamed chat.completion object."""
        message: dict = {"role": "assistant", "content": reply.content or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)}}
                for tc in reply.tool_calls
            ]
        assert reply.usage is not None
        answer = {
            "id": response_id(behaviour, barg, ctx),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
            "usage": reply.usage.as_openai(),
        }
        billed = self.server.owner.copilot_usage(model, reply, ctx)
        if billed is not None:
            answer["copilot_usage"] = billed
        self._json(200, answer)

    def _stream(self, model: str, reply: Reply, ctx: Ctx | None, behaviour: str = "normal",
                barg: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        ident = response_id(behaviour, barg, ctx)
        base = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

        def send(delta: dict, finish: str | None = None, usage: dict | None = None) -> None:
            chunk = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
            if usage is not None:
                chunk["usage"] = usage
                billed = self.server.owner.copilot_usage(model, reply, ctx)
                if billed is not None:  # the Copilot API's amount, in the last chunk (tests/support/copilot_api.py)
                    chunk["copilot_usage"] = billed
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        if behaviour == "small_chunks":
            self._send_small_chunks(send, reply)
        else:
            self._send_whole(send, reply)
        assert reply.usage is not None
        send({}, reply.finish_reason, reply.usage.as_openai())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    @staticmethod
    def _send_small_chunks(send, reply: Reply) -> None:
        """The role first, then content and each tool call's arguments a few characters per chunk."""
        send({"role": "assistant", "content": ""})
        for piece in split(reply.content) if reply.content else ():
            send({"content": piece})
        for i, tc in enumerate(reply.tool_calls):
            send({"tool_calls": [{"index": i, "id": tc.id, "type": "function", "function": {"name": tc.name,
                                                                                            "arguments": ""}}]})
            for piece in split(json.dumps(tc.arguments)):
                send({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})

    @staticmethod
    def _send_whole(send, reply: Reply) -> None:
        if reply.content:
            send({"role": "assistant", "content": reply.content})
        if reply.tool_calls:
            send(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": i,
                            "id": tc.id,
                            "type": "function",
                            "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)},
                        }
                        for i, tc in enumerate(reply.tool_calls)
                    ],
                }
            )


class _Server(ThreadingHTTPServer):
    # Daemon threads are not joined by server_close(): close() joins this server's own instead, so
    # a request still finishing its reply is not left running after the with block.
    daemon_threads = True
    allow_reuse_address = True
    owner: ScriptedProvider

    def process_request(self, request, client_address) -> None:
        """One thread per request, as ThreadingMixIn does, remembered so that close() can join it."""
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name=THREAD_PREFIX + "-request", daemon=True)
        with self.owner._lock:
            self.owner._requests = [t for t in self.owner._requests if t.is_alive()] + [thread]
        thread.start()


class ScriptedProvider:
    """The scripted provider on 127.0.0.1:<ephemeral port>, served from a daemon thread.

    Use as a context manager (or call start()/close()); close() stops the serving thread
    and joins it, so nothing is left behind.
    """

    handler_class: type[BaseHTTPRequestHandler] = _Handler  # a subclass may serve more paths
    stream_by_default = True  # a request without "stream" is streamed (OpenAI's default would be not to)

    def __init__(self, host: str = "127.0.0.1", port: int = 0, behaviour: str = "normal") -> None:
        assert behaviour in BEHAVIOURS, behaviour
        self.behaviour = behaviour  # the default provider behaviour (a [provider:...] marker overrides it)
        self._attempts: dict[str, int] = {}  # throttle: attempts per request body
        self._addr = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._requests: list[threading.Thread] = []
        self.served: list[Served] = []

    # lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        if self._server is not None:
            return self
        server = _Server(self._addr, self.handler_class)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=THREAD_PREFIX,
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            requests, self._requests = self._requests, []
        for request in requests:
            request.join(timeout=5)

    def threads(self) -> list[threading.Thread]:
        """The serving thread and every request thread of this provider so far."""
        with self._lock:
            return [t for t in (self._thread, *self._requests) if t is not None]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # info ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "provider not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _throttled(self, body: dict, attempts: int) -> bool:
        """throttle: True for the first ``attempts`` arrivals of the same request body."""
        key = json.dumps(body.get("messages"), sort_keys=True)
        with self._lock:
            seen = self._attempts[key] = self._attempts.get(key, 0) + 1
        return seen <= attempts

    def copilot_usage(self, model: str, reply: Reply, ctx: Ctx | None) -> dict | None:
        """The ``copilot_usage`` (AI credits) of a reply: a BYOK provider sends none."""
        return None

    def _record(self, served: Served) -> None:
        with self._lock:
            self.served.append(served)

    def requests_for(self, scenario: str) -> list[Served]:
        with self._lock:
            return [s for s in self.served if s.scenario == scenario]


if __name__ == "__main__":  # manual probing: python tests/support/provider.py [port]
    import sys

    with ScriptedProvider(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0) as p:
        print(p.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)  # the scenario: an answer that never comes
        except KeyboardInterrupt:
            pass
