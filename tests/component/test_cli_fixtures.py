"""The stored real-CLI fixtures (tests/fixtures/cli/<version>/<scenario>/) are what they claim.

They were written by tests/fixtures/record_versions.py from real Copilot CLI runs; these
checks read the files only (no CLI runs) and test the fixtures, not copilot-otel: each file
parses, the version in session.start matches the folder, meta.json agrees with the logs and
with what the scripted server answered, the CLI's own chat-span count is recorded, nothing
of the recording machine (or anything shaped like a secret) is stored, and they stay small.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.support.copilot_api import COPILOT_MODEL, DUMMY_TOKEN, MULTIPLIERS
from tests.support.provider import AUTOPILOT_NUDGES, ID_POOL_SIZE, MODEL, REUSED_ID

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
VERSIONS = ("0.0.400", "1.0.2", "1.0.24", "1.0.50", "1.0.70", "1.0.85", "1.0.92", "1.0.102")
EVERY_VERSION = ("plain", "multi_turn", "subagent", "failing_tool", "provider_error", "reused_ids", "streaming",
                 "throttled", "git_repo")
MAX_TOTAL_BYTES = 3.5 * 1024 * 1024  # three sessions recorded with content capture on took it past 3 MiB
MAX_STRING = 4000  # record_versions.MAX_STRING


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _fixtures() -> list[Path]:
    return sorted(p.parent for p in ROOT.glob("*/*/meta.json"))


FIXTURES = _fixtures()
IDS = [f"{p.parent.name}/{p.name}" for p in FIXTURES]


def _jsonl(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            obj = json.loads(line)
            assert isinstance(obj, dict), f"{path}:{n} is not a JSON object"
            out.append(obj)
    return out


class Fixture:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta = json.loads((path / "meta.json").read_text())
        sessions = sorted((path / "session-state").iterdir())
        assert len(sessions) == 1, f"{path}: expected one session folder, found {[s.name for s in sessions]}"
        self.session_dir = sessions[0]
        self.events = _jsonl(self.session_dir / "events.jsonl")

    def of_type(self, t: str) -> list[dict]:
        return [e for e in self.events if e["type"] == t]

    @property
    def version(self) -> str:
        return self.path.parent.name


@pytest.fixture(scope="module", params=FIXTURES, ids=IDS)
def fx(request) -> Fixture:
    return Fixture(request.param)


def test_every_version_has_the_common_scenarios():
    present = {(p.parent.name, p.name) for p in FIXTURES}
    missing = [(v, s) for v in VERSIONS for s in EVERY_VERSION if (v, s) not in present]
    missing += [(v, "autopilot") for v in VERSIONS if _vkey(v) >= (1, 0, 2) and (v, "autopilot") not in present]
    for s in ("copilot_api", "copilot_api_autopilot", "copilot_api_subagent", "copilot_api_throttled"):
        if ("1.0.102", s) not in present:
            missing.append(("1.0.102", s))
    assert not missing, f"fixtures missing: {missing}"


def test_fixtures_are_small():
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    assert total < MAX_TOTAL_BYTES, f"fixtures take {total} bytes"


def test_meta_names_its_folder(fx: Fixture):
    assert fx.meta["version"] == fx.version
    assert fx.meta["scenario"] == fx.path.name
    assert fx.meta["session_id"] == fx.session_dir.name
    assert not fx.meta["notes"] or all("COPILOT_HOME" in n for n in fx.meta["notes"]), fx.meta["notes"]


def test_session_start_names_the_version_and_session(fx: Fixture):
    start = fx.events[0]
    assert start["type"] == "session.start"
    assert start["data"]["copilotVersion"] == fx.version == fx.meta["copilot_version"]
    assert start["data"]["sessionId"] == fx.session_dir.name


def test_every_event_has_the_envelope(fx: Fixture):
    ids = set()
    for e in fx.events:
        assert {"type", "data", "id", "timestamp"} <= set(e), e
        assert isinstance(e["data"], dict)
        assert e["id"] not in ids, f"duplicate event id {e['id']}"
        ids.add(e["id"])
    assert Counter(e["type"] for e in fx.events) == Counter(fx.meta["event_types"])


def test_no_lock_files_and_only_the_session_log(fx: Fixture):
    names = sorted(p.name for p in fx.session_dir.iterdir())
    assert set(names) <= {"events.jsonl", "workspace.yaml"}, names
    assert not [p for p in fx.path.rglob("*") if p.name.endswith(".lock")]


def test_exit_codes_match_the_scenario(fx: Fixture):
    codes = [r["exit_code"] for r in fx.meta["runs"]]
    assert not any(r["timed_out"] for r in fx.meta["runs"])
    if fx.meta["expect_failure"]:
        assert codes[-1] != 0
    else:
        assert codes == [0] * len(codes)


def test_llm_calls_recorded_in_meta(fx: Fixture):
    llm = fx.meta["llm_requests"]
    assert llm["total"] == len(llm["calls"]) == sum(llm["by_status"].values())
    assert llm["answered"] == sum(1 for c in llm["calls"] if c["status"] == 200)
    behaviour = fx.meta["provider_behaviour"]
    if behaviour == "throttle":
        # every scripted call was refused once (429), then answered
        assert llm["by_status"].get("429") == llm["answered"] > 0
    if fx.meta["provider_scenario"] == "provider_error":
        assert llm["answered"] == 0 and llm["by_status"].get("500", 0) >= 2
        assert fx.of_type("session.error")


def test_otel_export_is_recorded_where_the_version_has_it(fx: Fixture):
    otel = fx.path / "otel.jsonl"
    if not fx.meta["features"]["otel_file"]:
        assert fx.meta["otel"] is None and not otel.exists()
        return
    assert fx.meta["otel"]["written"] == otel.exists()
    if not otel.exists():
        return
    recs = _jsonl(otel)
    spans = [r for r in recs if r.get("type") == "span"]
    chats = [s for s in spans if (s.get("attributes") or {}).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == fx.meta["otel"]["chat_spans"]
    assert Counter(str((s.get("attributes") or {}).get("gen_ai.operation.name") or s.get("name"))
                   for s in spans) == Counter(fx.meta["otel"]["spans_by_operation"])
    for s in spans:
        assert (s.get("resource") or {}).get("attributes", {}).get("service.version") == fx.version


def test_stdout_stream_parses_and_names_the_session(fx: Fixture):
    files = [fx.path / "stdout.jsonl", fx.path / "stdout.resume.jsonl"]
    json_out = "--output-format" in fx.meta["features"]["flags"]
    assert bool(fx.meta["stdout_event_types"]) == json_out  # every run that could stream was recorded with it
    if not fx.meta["stdout_stored"]:
        assert not any(f.exists() for f in files)
        return
    assert json_out and files[0].exists()
    assert files[1].exists() == (len(fx.meta["runs"]) == 2)
    for f in files:
        if not f.exists():
            continue
        lines = _jsonl(f)
        results = [e for e in lines if e.get("type") == "result"]
        for r in results:
            assert r["sessionId"] == fx.session_dir.name
        assert Counter(e.get("type") for e in lines) == Counter(fx.meta["stdout_event_types"][files.index(f)])


def test_logs_are_trimmed_and_hold_nothing_of_this_machine(fx: Fixture):
    for e in fx.of_type("system.message"):
        assert e["data"]["content"].startswith("<system prompt trimmed: ")
    forbidden = [DUMMY_TOKEN, str(ROOT.parents[2]), "/root", "/home/"]  # the token, this checkout, home folders
    secretish = re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9]{20,})")
    for f in fx.path.rglob("*"):
        if not f.is_file():
            continue
        text = f.read_text(encoding="utf-8")
        for bad in forbidden:
            assert bad not in text, f"{f} holds {bad!r}"
        assert not secretish.search(text), f"{f} holds something shaped like a token"
        assert re.findall(r"/tmp/[^\s\"']*", text) == [m for m in re.findall(r"/tmp/[^\s\"']*", text)
                                                       if m.startswith("/tmp/copilot-record/<run>")], f
        if f.suffix == ".jsonl":
            for line in text.splitlines():
                for s in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
                    assert len(s) <= MAX_STRING * 2, f"{f}: an untrimmed string of {len(s)} characters"


def test_models_and_mode(fx: Fixture):
    model = fx.meta["model"]
    assert fx.meta["mode"] in ("byok", "copilot-api")
    assert model == (COPILOT_MODEL if fx.meta["mode"] == "copilot-api" else MODEL)
    if not fx.meta["features"]["byok"]:
        assert fx.meta["mode"] == "copilot-api"
    models = {e["data"].get("model") for e in fx.of_type("assistant.message") if e["data"].get("model")}
    models |= {e["data"]["usage"]["model"] for e in fx.of_type("session.usage_record")}
    assert models <= {model}, models


def test_reused_response_ids_reach_the_log(fx: Fixture):
    ids = [e["data"].get("apiCallId") for e in fx.of_type("assistant.message")]
    ids += [e["data"]["usage"].get("apiCallId") for e in fx.of_type("session.usage_record")]
    ids = [i for i in ids if i]
    if fx.meta["provider_behaviour"] == "reuse_ids":
        assert set(ids) <= {REUSED_ID}
    elif fx.meta["provider_behaviour"] == "id_pool":
        assert set(ids) <= {f"chatcmpl-pool-{i}" for i in range(ID_POOL_SIZE)}
        assert len(ids) > len(set(ids)) or not ids


def test_reused_ids_fixture_has_two_interactions():
    for v in VERSIONS:
        fx = Fixture(ROOT / v / "reused_ids")
        assert len(fx.meta["runs"]) == 2
        assert fx.meta["llm_requests"]["answered"] == 5  # plain (2) + multi_turn (3)
        assert len(list(fx.of_type("user.message"))) >= 2


def test_copilot_api_sessions_of_1_0_102_carry_cost():
    multiplier = MULTIPLIERS[COPILOT_MODEL]
    for name in ("copilot_api", "copilot_api_autopilot", "copilot_api_subagent", "copilot_api_throttled", "git_repo"):
        fx = Fixture(ROOT / "1.0.102" / name)
        records = fx.of_type("session.usage_record")
        assert len(records) == fx.meta["llm_requests"]["answered"]
        assert records and all(r["data"]["usage"]["cost"] == multiplier for r in records)
        assert {r["data"]["usage"]["initiator"] for r in records} <= {"user", "agent", "sub-agent"}
        assert all(r["data"]["usage"]["isByok"] is False for r in records)
        snap = fx.of_type("session.shutdown")[-1]["data"]["accountingSnapshot"]
        user_calls = sum(1 for r in records if r["data"]["usage"]["initiator"] == "user")
        assert snap["totalPremiumRequestCost"] == user_calls * multiplier
    auto = Fixture(ROOT / "1.0.102" / "copilot_api_autopilot")
    snap = auto.of_type("session.shutdown")[-1]["data"]["accountingSnapshot"]
    assert snap["totalPremiumRequestCost"] == (1 + AUTOPILOT_NUDGES) * multiplier == 3


def test_git_repo_context_of_1_0_102():
    fx = Fixture(ROOT / "1.0.102" / "git_repo")
    ctx = fx.events[0]["data"]["context"]
    assert ctx["repository"] == "octo-org/octo-repo"
    assert ctx["branch"] == fx.meta["git"]["branch"]
    assert ctx["headCommit"] == fx.meta["git"]["head"]
    assert ctx["gitRoot"] == ctx["cwd"]


# ---------------------------------------------------------------------------------------
# The servers the fixtures are recorded against (tests/support/copilot_api.py, tests/support/provider.py
# behaviours): fast HTTP checks, no CLI.

import socket  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from tests.support.copilot_api import CopilotApi  # noqa: E402
from tests.support.provider import CHUNK_CHARS, THROTTLE_RETRY_AFTER, decide, marker, provider_marker  # noqa: E402


def _request(url: str, body: dict | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"},
                                 method="POST" if body is not None else "GET")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to loopback
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def _chunks(raw: bytes) -> list[dict]:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def _body(text: str, steps: int = 0, stream: bool = True) -> dict:
    msgs = [{"role": "user", "content": text}]
    for i in range(steps):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        msgs += [{"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"}]
    body = {"model": COPILOT_MODEL, "messages": msgs}
    if stream:
        body["stream"] = True
    return body


def test_stand_in_serves_models_and_chat_and_stops():
    with CopilotApi() as api:
        status, headers, raw = _request(f"{api.url}/models")
        assert status == 200 and headers.get("x-github-request-id")
        models = {m["id"]: m for m in json.loads(raw)["data"]}
        assert models[COPILOT_MODEL]["billing"]["multiplier"] == MULTIPLIERS[COPILOT_MODEL] == 1
        assert models[COPILOT_MODEL]["capabilities"]["supports"]["tool_calls"] is True
        status, _, raw = _request(f"{api.url}/v1/models")  # as a BYOK provider: the scripted provider's model
        assert [m["id"] for m in json.loads(raw)["data"]] == [MODEL]
        status, headers, _ = _request(f"{api.url}/no/such/path")
        assert status == 404 and headers.get("x-github-request-id")
        status, _, raw = _request(f"{api.url}/chat/completions", _body(f"{marker('plain')} go"))
        assert status == 200 and _chunks(raw)[-1]["choices"][0]["finish_reason"] == "tool_calls"
        logged = [(r["method"], r["path"], r["status"]) for r in api.request_log()]
        assert ("GET", "/models", 200) in logged and ("POST", "/chat/completions", 200) in logged
        threads = api.threads()
    assert not [t for t in threads if t.is_alive()]


def test_stand_in_refuses_and_logs_proxied_requests():
    with CopilotApi() as api:
        with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
            sock.sendall(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n")
            assert sock.recv(64).split()[1] == b"403"
        assert api.request_log()[-1]["proxied"] and api.request_log()[-1]["path"] == "api.github.com:443"
        assert api.env()["HTTPS_PROXY"] == api.url and api.env()["COPILOT_API_URL"] == api.url


def test_reused_and_pooled_response_ids():
    with CopilotApi() as api:
        ids = set()
        for step in range(3):
            _, _, raw = _request(f"{api.url}/chat/completions",
                                 _body(f"{marker('multi_turn')} {provider_marker('reuse_ids')}", step))
            ids |= {c["id"] for c in _chunks(raw)}
        assert ids == {REUSED_ID}
        pooled = []
        for step in range(3):
            _, _, raw = _request(f"{api.url}/chat/completions",
                                 _body(f"{marker('multi_turn')} {provider_marker('id_pool')}", step))
            pooled.append({c["id"] for c in _chunks(raw)}.pop())
        assert set(pooled) <= {f"chatcmpl-pool-{i}" for i in range(ID_POOL_SIZE)} and len(set(pooled)) < len(pooled)


def test_small_chunks_carry_the_same_reply():
    body = _body(f"{marker('failing_tool', '/tmp/x')} {provider_marker('small_chunks')}")
    _, reply = decide(body)
    with CopilotApi() as api:
        _, _, raw = _request(f"{api.url}/chat/completions", body)
    chunks = _chunks(raw)
    args: dict[int, str] = {}
    for c in chunks:
        for tc in c["choices"][0]["delta"].get("tool_calls") or []:
            args[tc["index"]] = args.get(tc["index"], "") + tc["function"].get("arguments", "")
            assert len(tc["function"].get("arguments", "")) <= CHUNK_CHARS
    assert [json.loads(args[i]) for i in sorted(args)] == [tc.arguments for tc in reply.tool_calls]
    assert len(chunks) > 20


def test_throttle_answers_429_first_then_the_reply():
    body = _body(f"{marker('plain')} {provider_marker('throttle')}")
    with CopilotApi() as api:
        status, headers, _ = _request(f"{api.url}/chat/completions", body)
        assert status == 429 and headers["retry-after"] == THROTTLE_RETRY_AFTER
        status, _, raw = _request(f"{api.url}/chat/completions", body)
        assert status == 200 and _chunks(raw)
        assert [s.status for s in api.served] == [429, 200]


def test_a_request_without_stream_gets_one_completion():
    with CopilotApi() as api:
        status, headers, raw = _request(f"{api.url}/chat/completions", _body(f"{marker('plain')} go", stream=False))
    obj = json.loads(raw)
    assert status == 200 and headers["content-type"] == "application/json"
    assert obj["object"] == "chat.completion"
    assert obj["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert obj["usage"]["prompt_tokens"] > 0
