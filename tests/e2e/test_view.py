"""The web view in a real browser (Debian's Chromium, headless, driven by Playwright) against the real
daemon as a subprocess and the real Copilot CLI: live updates without a reload, stuck sessions, the
waterfall with its sub-agent, hostile log values shown as text, and the HTTP side's limits."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from copilot_otel.config import ModelOptions
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.replay.runner import replay_files
from copilot_otel.web.routes import MAX_STREAMS
from copilot_otel.web.waterfall import PAGE_SPANS
from tests.support import viewclient as view_api
from tests.support.biglog import grow
from tests.support.browser import screenshot, view_url
from tests.support.commands import start_view
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess, complete_lines_spans, view_token
from tests.support.events import SessionLog
from tests.support.files import new_session
from tests.support.net import LOOPBACK, wait_until
from tests.support.viewclient import EventStream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")
TRACE_URL = "http://jaeger.example:16686/trace/{trace_id}"
HOSTILE_TOOL = '<script>window.__pwned = "tool"</script><img src=x onerror="window.__pwned=\'img\'">'
HOSTILE_BRANCH = '"><script>window.__pwned="branch"</script>'
HOSTILE_ERROR = "</td><b>bold</b><script>window.__pwned='error'</script>"


def copy_session(scenario: str, home: Path) -> Path:
    """A stored real log of the pinned CLI, copied into ``home``; its events.jsonl."""
    source = next((FIXTURES / scenario).rglob("events.jsonl"))
    target = home / "session-state" / source.parent.name
    shutil.copytree(source.parent, target)
    return target / "events.jsonl"


def row(page, session_id: str):
    return page.locator(f'tr.session[data-id="{session_id}"]')


def state_of(page, session_id: str) -> str | None:
    found = row(page, session_id)
    return found.get_attribute("data-state") if found.count() else None


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """The real daemon, stuck after 2 s without an event, traces linked to a Jaeger URL."""
    root = tmp_path_factory.mktemp("view")
    (root / "home" / "session-state").mkdir(parents=True)
    process = DaemonProcess(root / "home", root / "state", traces_file=root / "traces.jsonl",
                            args=FAST + ("--stuck-after", "2", "--stuck-after-tool", "2", "--trace-url", TRACE_URL))
    with process:
        yield process


def test_a_live_cli_session_appears_and_changes_state_without_a_reload(daemon, browser, cli, provider, tmp_path):
    """With the sessions page open, a real CLI session started afterwards appears while it waits on its
    tool and turns to ended when the CLI exits, pushed by the server: the page is never reloaded."""
    page = browser.page()
    page.goto(daemon.page_url())
    page.wait_for_selector("#status.live")
    page.evaluate("window.__sameDocument = true")
    proc = cli.start(prompt_for("sleep_tool", 1), home=daemon.home, port=provider.port, cwd=tmp_path / "work")
    try:
        seen = wait_until(lambda: state_of(page, proc.session_id), timeout=30, what="the session on the page")
        assert seen in ("working", "waiting_tool", "stuck", "idle")
        run = proc.wait()
    finally:
        proc.kill()
    wait_until(lambda: state_of(page, run.session_id) == "ended", timeout=30, what="the session to end")
    assert page.evaluate("window.__sameDocument") is True
    assert page.locator("#status").inner_text() == "live" and page.errors == []


def test_a_stuck_session_shows_as_stuck_and_its_tool_is_highlighted(daemon, browser, cli, provider, tmp_path):
    """A tool that sleeps past --stuck-after-tool makes its session stuck on the sessions page; its page
    highlights the sleeping bash call with how long it has waited, growing without a new event."""
    page = browser.page()
    page.goto(daemon.page_url())
    proc = cli.start(prompt_for("sleep_tool", 8), home=daemon.home, port=provider.port, cwd=tmp_path / "work")
    try:
        wait_until(lambda: state_of(page, proc.session_id) == "stuck", timeout=30, what="stuck on the page")
        screenshot(page, "sessions")
        assert row(page, proc.session_id).locator("td").nth(6).inner_text().startswith("bash")
        row(page, proc.session_id).locator("td").nth(3).click()
        page.wait_for_url(f"**/session/{proc.session_id}")
        waiting = page.locator(".span.waiting")
        waiting.wait_for()
        assert waiting.locator(".name").inner_text() == "execute_tool bash"
        assert "running" in waiting.get_attribute("class")
        first = waiting.locator(".waited").inner_text()
        page.wait_for_timeout(1500)
        assert waiting.locator(".waited").inner_text() != first and first.startswith("waiting")
        assert page.locator("#state").inner_text() == "stuck"
        screenshot(page, "session-stuck")
        proc.wait()
    finally:
        proc.kill()
    page.wait_for_selector(".span.waiting", state="detached", timeout=20_000)
    assert page.errors == []


def test_clicking_a_session_shows_its_waterfall_with_the_subagent_under_its_task_call(daemon, browser):
    """A real sub-agent session: a click on its row opens its waterfall, where the sub-agent's
    invoke_agent row hangs under the task call, its turns under it, the span ids those of replay,
    and each interaction links to its trace at the configured URL."""
    path = copy_session("subagent", daemon.home)
    session_id = path.parent.name
    expected = MemorySink()
    replay_files([path], expected, options=ModelOptions())
    page = browser.page()
    page.goto(daemon.page_url())
    row(page, session_id).wait_for()
    row(page, session_id).locator("td").nth(4).click()
    page.wait_for_url(f"**/session/{session_id}")
    page.wait_for_selector(".span")
    rows = page.locator(".span").evaluate_all(
        "rows => rows.map(r => [r.dataset.spanId, r.dataset.parentId, Number(r.dataset.depth),"
        " r.querySelector('.name').textContent])")
    assert sorted(r[0] for r in rows) == sorted(f"{s.span_id:016x}" for s in expected.records)
    by_id = {r[0]: r for r in rows}
    task = next(r for r in rows if r[3] == "execute_tool task")
    agent = next(r for r in rows if r[3].startswith("invoke_agent ") and r[2] > 0)
    assert agent[1] == task[0] and agent[2] == task[2] + 1
    assert rows.index(agent) == rows.index(task) + 1
    under_agent = [r for r in rows if r[1] == agent[0]]
    assert under_agent and all(r[3] == "turn 0" or r[3].startswith("turn") for r in under_agent)
    assert all(by_id[r[1]][2] == r[2] - 1 for r in rows if r[1])
    traces = {f"{s.trace_id:032x}" for s in expected.records}
    links = page.locator("a.trace-link").evaluate_all("links => links.map(a => a.href)")
    assert sorted(links) == sorted(TRACE_URL.format(trace_id=t) for t in traces)
    exported = wait_until(lambda: traces <= {s.trace_id for s in complete_lines_spans(daemon.traces_file)},
                          what="the daemon to export the same traces")
    assert exported
    page.locator(".span", has_text="execute_tool task").first.click()
    details = page.locator("#details")
    assert "gen_ai.tool.name" in details.inner_text() and "task" in details.inner_text()
    screenshot(page, "session")
    assert page.errors == []


def hostile_session(home: Path) -> str:
    """A live session whose tool name, branch and error text are markup meant to run."""
    log = SessionLog("hostile-session", step_ms=5)
    log.start(repository="octo/<b>repo</b>", branch=HOSTILE_BRANCH, gitRoot="/work")
    log.user()
    log.turn_start()
    log.usage()
    log.message(tools=[HOSTILE_TOOL])
    log.tool_start(HOSTILE_TOOL, "call-x")
    log.tool_complete("call-x", success=False, error=HOSTILE_ERROR, error_code=HOSTILE_ERROR)
    log.tool_start(HOSTILE_TOOL, "call-y")
    new_session(home, log.session_id).write_bytes(log.jsonl())
    return log.session_id


def test_values_from_the_log_render_as_text(daemon, browser):
    """A tool name, a branch and an error text holding <script> and <img onerror> show as the literal
    text they are, on both pages and in a span's details, and none of them runs."""
    session_id = hostile_session(daemon.home)
    page = browser.page()
    page.goto(daemon.page_url())
    found = row(page, session_id)
    found.wait_for()
    cells = found.locator("td")
    assert cells.nth(3).inner_text() == HOSTILE_BRANCH
    assert cells.nth(2).inner_text() == "octo/<b>repo</b>"
    assert cells.nth(6).inner_text().startswith(HOSTILE_TOOL)
    found.locator("td").nth(4).click()
    page.wait_for_selector(".span.error")
    names = page.locator(".span .name").all_inner_texts()
    assert f"execute_tool {HOSTILE_TOOL}" in names
    page.locator(".span.error").first.click()
    assert HOSTILE_ERROR in page.locator("#details").inner_text().splitlines()  # error.type, as exported
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#waterfall img, #waterfall script, #waterfall b, #facts b, #details b").count() == 0
    assert page.errors == []


def get(url: str, *, method: str = "GET", headers: dict | None = None, token: str | None = None
        ) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request; with ``token``, as a script sends it (Authorization: Bearer)."""
    if token is not None:
        headers = {"Authorization": f"Bearer {token}", **(headers or {})}
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read() if "event-stream" not in response.headers.get("Content-Type", "") else b""
            return response.status, dict(response.headers), body
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_every_response_is_locked_down_and_nothing_else_is_served(daemon):
    """Pages, assets, JSON, streams, /metrics and errors all carry the CSP and nosniff; there is no
    directory listing, no file outside the view's routes, no write method; a Host name other than
    localhost (DNS rebinding) is refused."""
    session_id = copy_session("plain", daemon.home).parent.name
    token = daemon.token
    wait_until(lambda: get(view_url(daemon.port, f"/api/session/{session_id}"), token=token)[0] == 200,
               what="the session")
    base = f"http://{LOOPBACK}:{daemon.port}"
    answers = {path: get(base + path, token=token) for path in (
        "/", f"/session/{session_id}", "/api/sessions", f"/api/session/{session_id}", "/static/session.js",
        "/static/view.css", "/metrics", "/healthz", "/api/sessions/stream", f"/api/session/{session_id}/stream",
        "/static/", "/static", "/static/../README.md", "/static/%2e%2e/web.py", "/webstatic/view.css",
        "/copilot_otel/web/routes.py", "/session/../../etc/passwd", "/session/nope", "/api/sessions?state=bogus")}
    for path, (_status, headers, _body) in answers.items():
        assert "script-src 'self'" in headers.get("Content-Security-Policy", ""), path
        assert headers.get("X-Content-Type-Options") == "nosniff", path
    ok = {path for path, (status, _h, _b) in answers.items() if status == 200}
    assert ok == {"/", f"/session/{session_id}", "/api/sessions", f"/api/session/{session_id}",
                  "/static/session.js", "/static/view.css", "/metrics", "/healthz", "/api/sessions/stream",
                  f"/api/session/{session_id}/stream", "/session/nope"}
    assert answers["/api/sessions?state=bogus"][0] == 400
    assert answers["/session/nope"][2] == answers[f"/session/{session_id}"][2]  # a shell: the same for any id
    assert get(base + "/api/session/nope", token=token)[0] == 404 and answers["/static/"][0] == 404
    assert answers["/static/session.js"][1]["Content-Type"].startswith("text/javascript")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert get(base + "/api/sessions", method=method, token=token)[0] == 405
    assert get(base + "/", headers={"Host": f"attacker.example:{daemon.port}"}, token=token)[0] == 403
    assert get(base + "/", headers={"Host": f"localhost:{daemon.port}"}, token=token)[0] == 200


def test_view_command_serves_replayed_history_without_a_daemon(browser, tmp_path):
    """`copilot-otel view PATH` serves the same pages over stored real logs: every session listed,
    and a session's waterfall with the spans replay makes."""
    home = tmp_path / "home"
    paths = [copy_session(scenario, home) for scenario in ("subagent", "plain", "failing_tool")]
    proc, port = start_view(home, tmp_path / "state", tmp_path / "view.log", timeout=30)
    token_file = tmp_path / "state" / f"web-{port}.json"
    try:
        page = browser.page()
        page.goto(view_url(port) + f"#token={view_token(tmp_path / 'state', port)}")
        page.wait_for_selector("tr.session")
        shown = page.locator("tr.session").evaluate_all("rows => rows.map(r => [r.dataset.id, r.dataset.state])")
        assert sorted(map(tuple, shown)) == sorted((p.parent.name, "ended") for p in paths)
        expected = MemorySink()
        replay_files([paths[2]], expected)
        row(page, paths[2].parent.name).locator("td").nth(5).click()
        page.wait_for_selector(".span")
        ids = page.locator(".span").evaluate_all("rows => rows.map(r => r.dataset.spanId)")
        assert sorted(ids) == sorted(f"{s.span_id:016x}" for s in expected.records)
        assert page.locator(".span.error .name").all_inner_texts()  # the failing tool
        assert page.errors == []
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert proc.returncode == 0
    assert not token_file.exists()  # the token died with the server


def test_the_json_api_pages_and_filters_many_sessions(daemon):
    """/api/sessions pages through every known session and filters by state and repository."""
    for i in range(30):
        log = SessionLog(f"many-{i:02d}")
        log.start(repository=f"octo/repo-{i % 3}", branch="main")
        log.user()
        log.turn_start()
        log.answer()
        log.shutdown()
        folder = daemon.home / "session-state" / log.session_id
        folder.mkdir()
        (folder / "events.jsonl").write_bytes(log.jsonl())
    base = view_url(daemon.port, "/api/sessions")
    token = daemon.token
    wait_until(lambda: json.loads(get(base + "?repository=octo/repo-1", token=token)[2])["matching"] == 10,
               what="30 sessions")
    seen = []
    offset = 0
    while True:
        data = json.loads(get(f"{base}?repository=octo/repo-1&limit=4&offset={offset}", token=token)[2])
        seen += [s["id"] for s in data["sessions"]]
        offset += 4
        if offset >= data["matching"]:
            break
    assert sorted(seen) == [f"many-{i:02d}" for i in range(30) if i % 3 == 1]
    ended = json.loads(get(base + "?state=ended&limit=500", token=token)[2])
    assert {s["state"] for s in ended["sessions"]} == {"ended"} and ended["matching"] >= 30


def test_a_page_shows_nothing_without_its_token_and_keeps_it_in_its_origin_not_in_a_cookie(daemon, browser):
    """Without the token a page is an empty shell that says how to get in (its data answers 401); the URL
    `copilot-otel open` lands on (the token in the fragment) shows the sessions, the token leaves the address
    bar, no cookie is set, and the pages then work across reloads and clicks from the origin's storage."""
    session_id = copy_session("failing_tool", daemon.home).parent.name
    browser.context.clear_cookies()
    page = browser.page()
    page.goto(view_url(daemon.port, "/"))
    page.evaluate("localStorage.clear()")
    for path in ("/", f"/session/{session_id}"):
        response = page.goto(view_url(daemon.port, path))
        assert response.status == 200 and session_id.encode() not in response.body(), path
        wait_until(lambda: "copilot-otel open" in page.locator("#status").inner_text(), timeout=15,
                   what="the page to say it needs its token")
        assert page.locator("tr.session, .span").count() == 0
    page.goto(view_url(daemon.port, "/") + "#token=" + "x" * 43)
    wait_until(lambda: "copilot-otel open" in page.locator("#status").inner_text(), timeout=15,
               what="a wrong token refused")
    page.goto(daemon.page_url())
    row(page, session_id).wait_for()
    assert page.url == view_url(daemon.port, "/")  # the token left the address bar
    assert browser.context.cookies() == [] and page.evaluate("document.cookie") == ""
    assert page.evaluate("localStorage.getItem('copilot-otel-token')") == daemon.token
    page.reload()
    row(page, session_id).wait_for()
    page.wait_for_selector("#status.live")
    row(page, session_id).locator("td").nth(4).click()
    page.wait_for_url(f"**/session/{session_id}")
    page.wait_for_selector(".span")
    page.reload()
    page.wait_for_selector(".span")
    assert "token" not in page.url and browser.context.cookies() == [] and page.errors == []


def test_a_page_refused_a_stream_retries_and_shows_its_rows_once_streams_free_up(daemon, browser):
    """With every live view the daemon serves taken (it answers 503), the sessions page says it is retrying
    and shows no row; once they are let go, its rows arrive on a later try, without a reload."""
    log = SessionLog("retry-session")
    log.start(repository="octo/retry")
    log.user()
    new_session(daemon.home, log.session_id).write_bytes(log.jsonl())
    wait_until(lambda: view_api.get_json(daemon.port, "/api/sessions?repository=octo/retry")["matching"],
               what="the session on /api/sessions")
    held: list[EventStream] = []

    def take_one() -> bool:
        """Hold one more stream; whether the daemon served it (else it refused it: 503)."""
        stream = EventStream(daemon.port, "/api/sessions/stream")
        if stream.status == 503:
            stream.close()
            return False
        held.append(stream)
        return True

    def status() -> str:
        return page.locator("#status").inner_text()

    page = browser.page()
    try:
        for _ in range(5):
            while take_one():  # every stream the daemon will serve, whatever other tests' pages still hold
                assert len(held) <= MAX_STREAMS
            page.goto(daemon.page_url("/?repository=octo/retry"), timeout=60_000)
            page.evaluate("window.__sameDocument = true")
            # Conditions, not deadlines: on a loaded machine each step may take long, none may be skipped.
            wait_until(lambda: "retrying" in status() or status() == "live", timeout=120, what="the page's first try")
            if "retrying" in status():
                break
            # A stream an earlier page held was let go after it was counted, and this page took its place. Let
            # this page's stream go, hold it as soon as the daemon frees it, and try again.
            page.goto("about:blank")
            wait_until(take_one, timeout=120, interval=0.5, what="the page's stream let go")
        else:
            pytest.fail("the page found a free stream on every try")
        assert row(page, log.session_id).count() == 0
        screenshot(page, "sessions-retrying")
    finally:
        for stream in held:
            stream.close()
    # The next try comes at most 30 s (with jitter) after the last: wait for the row, however long that takes here.
    row(page, log.session_id).wait_for(timeout=180_000)
    assert page.evaluate("window.__sameDocument") is True
    wait_until(lambda: status() == "live", timeout=60, what="the page live again")
    assert page.errors == []


def test_a_session_too_large_for_one_answer_shows_every_span(daemon, browser):
    """A session of more than twice PAGE_SPANS spans: the page gets them page after page over its stream and
    shows every span replay makes."""
    source = next((FIXTURES / "multi_turn").rglob("events.jsonl"))
    per_copy = MemorySink()
    replay_files([source], per_copy, options=ModelOptions())
    real = source.read_bytes()
    path = new_session(daemon.home, "large-session")
    path.write_bytes(grow(real, len(real) * (2 * PAGE_SPANS // len(per_copy.records) + 50)))
    expected = MemorySink()
    replay_files([path], expected, options=ModelOptions())
    assert len(expected.records) > 2 * PAGE_SPANS
    wait_until(lambda: view_api.get(daemon.port, "/api/session/large-session")[0] == 200, timeout=60,
               what="the session")
    first = view_api.get_json(daemon.port, "/api/session/large-session")["trace"]
    assert len(first["spans"]) == PAGE_SPANS and first["more"] is True
    page = browser.page()
    page.goto(daemon.page_url("/session/large-session"),
              timeout=60_000)  # its first read of a 12 MB log, on a busy machine
    wait_until(lambda: page.locator(".span").count() >= len(expected.records), timeout=120,
               what="every span on the page")
    shown = page.locator(".span").evaluate_all("rows => rows.map(r => r.dataset.spanId)")
    assert sorted(shown) == sorted(f"{s.span_id:016x}" for s in expected.records)
    assert "Loading spans" not in page.locator("#note").inner_text()
    assert page.errors == []
    page.close()
