// The session page: the waterfall of every interaction; open spans grow while the session is live.
"use strict";

const sessionId = decodeURIComponent(location.pathname.split("/").pop());
const spans = new Map();  // span id -> span (finished, or a snapshot of an open one)
let openIds = new Set();
let session = null;
let traceUrl = null;
let lastEventMs = 0;
let dropped = 0;
let position = null;  // {token, next}: where a new stream goes on from
const expanded = new Map();  // trace id -> true/false once the user toggled it
const rendered = new Map();  // trace id -> {sig, node}
let selected = null;
const LIVE = new Set(["working", "waiting_tool", "waiting_user", "idle", "stuck"]);

function isLive() { return session && LIVE.has(session.state); }

function merge(data) {
  session = data.session;
  // Asked by a unique start of its id: the address names the whole id (to share, to reload).
  if (session && session.id !== sessionId) history.replaceState(null, "", `/session/${encodeURIComponent(session.id)}`);
  traceUrl = data.trace_url;
  const trace = data.trace;
  if (trace.reset) { spans.clear(); rendered.clear(); document.getElementById("waterfall").replaceChildren(); }
  for (const s of trace.spans) spans.set(s.id, s);
  const nowOpen = new Set(trace.open.map((s) => s.id));
  for (const id of openIds) {
    const s = spans.get(id);
    if (!nowOpen.has(id) && s && s.running) spans.delete(id);  // closed: its finished record came, or will
  }
  for (const s of trace.open) {
    const known = spans.get(s.id);
    if (!known || known.running || s.running) spans.set(s.id, s);
  }
  openIds = nowOpen;
  lastEventMs = trace.last_event_ms;
  dropped = trace.dropped;
  position = {token: trace.token, next: trace.next};
  const note = document.getElementById("note");
  const notes = [];
  if (!data.capture) notes.push("Prompt and tool text are not shown: content capture is off, as for the traces " +
    "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true turns it on for both).");
  if (dropped) notes.push(`The ${dropped} oldest spans of this session are not shown (memory cap).`);
  if (trace.more) notes.push(`Loading spans: ${trace.next - trace.dropped} of ${trace.total - trace.dropped}\u2026`);
  note.textContent = notes.join(" ");
  note.hidden = notes.length === 0;
}

// "8.67 (1.20 autopilot)", "8.67+ (some LLM calls reported no amount)", "unknown: no LLM call reported an amount".
function creditsFact(s) {
  const shown = fmtCredits(s);
  if (shown === "unknown") return "unknown: no LLM call reported an amount";
  const notes = [s.nudge_nano_aiu && `${(s.nudge_nano_aiu / 1e9).toFixed(2)} autopilot`,
    shown.endsWith("+") && "and more: some LLM calls reported no amount"].filter(Boolean);
  return shown + (notes.length ? ` (${notes.join("; ")})` : "");
}

function facts() {
  const s = session;
  document.getElementById("sid").textContent = s.id;
  document.title = `Copilot session ${s.id.slice(0, 8)}${s.name ? `: ${s.name}` : ""}`;
  document.getElementById("state").replaceWith(Object.assign(badge(s.state), {id: "state"}));
  const path = (v) => (v ? el("span", {}, ...slashBreaks(v)) : null);  // wraps after a "/", not in a word
  const items = [
    ["name", s.name], ["model", s.model], ["repository", path(s.repository)], ["branch", path(s.branch)],
    ["cwd", path(s.cwd)],
    ["CLI", s.cli_version], ["started", fmtTime(s.started_ms)],
    ["last activity", el("span", {dataset: {ago: s.last_ms}}, fmtAgo(s.last_ms))],
    ["interactions", s.nudges ? `${s.interactions} (${s.nudges} autopilot)` : s.interactions],
    ["turns", s.turns], ["LLM calls", s.llm_calls],
    ["tools", s.tool_failures ? `${s.tool_calls} (${s.tool_failures} failed)` : s.tool_calls],
    ["tokens", `${fmtNumber(s.input_tokens)} in, ${fmtNumber(s.output_tokens)} out`],
    // No amount is "-", as the list and `sessions` say it (never a 0 that reads as a known zero).
    ["premium requests", s.premium_requests || "-"],
    ["AI credits", s.nano_aiu || s.credits_status ? creditsFact(s) : "-"],
    ["last interaction", s.last_end],
    // Abandoned: its process died in the tool, whose end (how long it ran) is not known: said as `inspect` says it.
    s.state === "abandoned"
      ? ["cut off in", s.waiting_on ? el("span", {}, `tool ${s.waiting_on} since ${fmtTime(s.waiting_since_ms)}, end unknown`)
        : null]
      : ["waiting on", s.waiting_on ? el("span", {}, s.waiting_on, " for ",
        el("span", {dataset: {since: s.waiting_since_ms}})) : null],
    ["asks the user", s.state === "waiting_user" && s.asking ? el("span", {}, s.asking, " for ",
      el("span", {dataset: {since: s.asking_since_ms}})) : null],
  ];
  document.getElementById("facts").replaceChildren(...items.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function byStart(a, b) { return a.start_ms - b.start_ms || a.end_ms - b.end_ms; }

function traces() {
  const groups = new Map();
  for (const s of spans.values()) {
    if (!groups.has(s.trace)) groups.set(s.trace, []);
    groups.get(s.trace).push(s);
  }
  return [...groups.entries()].map(([id, list]) => ({id, list, start: Math.min(...list.map((s) => s.start_ms))}))
    .sort((a, b) => a.start - b.start);
}

// The spans of one trace in waterfall order (parents before children), with their depth.
function ordered(list) {
  const ids = new Set(list.map((s) => s.id));
  const children = new Map();
  const roots = [];
  for (const s of list) {
    if (s.parent && ids.has(s.parent)) {
      if (!children.has(s.parent)) children.set(s.parent, []);
      children.get(s.parent).push(s);
    } else roots.push(s);
  }
  const out = [];
  const walk = (s, depth) => {
    out.push([s, depth]);
    for (const c of (children.get(s.id) || []).sort(byStart)) walk(c, depth + 1);
  };
  for (const r of roots.sort(byStart)) walk(r, 0);
  return out;
}

// The open span the session waits on: the innermost running tool, else the newest running span.
function waitedOn() {
  if (!isLive() || session.state === "idle") return null;
  const running = [...spans.values()].filter((s) => s.running);
  const tools = running.filter((s) => s.attrs["gen_ai.operation.name"] === "execute_tool");
  const parents = new Set(running.map((s) => s.parent));
  const inner = tools.filter((t) => !parents.has(t.id) || !tools.some((o) => o.parent === t.id));
  const pick = (inner.length ? inner : running).sort(byStart);
  return pick.length ? (inner.length ? pick[0] : pick[pick.length - 1]).id : null;
}

// A span cut off by its session's death: only a lower bound of its duration is known ("≥ 0 ms, end unknown").
function tookText(s) {
  const took = fmtDuration(endOf(s) - s.start_ms);
  const cutOff = (s.running && !isLive()) || s.attrs["error.type"] === "incomplete";
  return cutOff ? `≥ ${took}, end unknown` : took;
}

function endOf(s) {
  if (!s.running) return s.end_ms;
  return isLive() ? Math.max(serverNow(), s.end_ms) : Math.max(lastEventMs, s.end_ms);
}

function spanClass(s, waiting) {
  const op = s.attrs["gen_ai.operation.name"] || (s.name.startsWith("turn") ? "turn" : "other");
  const parts = ["span", `op-${op}`];
  if (s.status === "error") parts.push("error");
  if (s.running) parts.push(isLive() ? "running" : "incomplete");
  if (s.id === waiting) parts.push("waiting");
  if (s.id === selected) parts.push("selected");
  return parts.join(" ");
}

function renderTrace(trace, index, count, waiting) {
  const list = ordered(trace.list);
  const root = list[0][0];
  const running = trace.list.some((s) => s.running);
  const open = expanded.has(trace.id) ? expanded.get(trace.id) : (running || index >= count - 3);
  const end = Math.max(...trace.list.map(endOf));
  const how = root.attrs["github.copilot.interaction.end"] || (running ? (isLive() ? "running" : "never ended") : "");
  const head = el("summary", {},
    el("span", {class: "title"}, `interaction ${index + 1}`),
    el("span", {class: "dim"}, ` ${fmtTime(trace.start)} \u00b7 `),
    el("span", {class: "trace-duration"}, fmtDuration(end - trace.start)),
    how ? el("span", {class: `end end-${how.replace(/[^a-z_]/g, "")}`}, how) : "",
    root.attrs["github.copilot.autopilot.continuation"] ? el("span", {class: "end"}, "autopilot") : "");
  if (traceUrl && /^https?:\/\//.test(traceUrl)) {
    head.append(el("a", {class: "trace-link", href: traceUrl.split("{trace_id}").join(trace.id), target: "_blank",
      rel: "noopener noreferrer"}, "open trace \u2197"));
  }
  const rows = list.map(([s, depth]) => {
    const name = s.name === "turn" ? `turn ${s.attrs["github.copilot.turn_id"] ?? ""}` : s.name;  // one span name, numbered here
    const label = el("span", {class: "label"}, el("span", {class: "name"}, name),
      el("span", {class: "dur"}), s.id === waiting ? el("span", {class: "waited"}) : "");
    label.firstChild.style.paddingLeft = `${depth * 1.1}em`;
    const row = el("div", {class: spanClass(s, waiting), dataset: {spanId: s.id, parentId: s.parent || "",
      depth: String(depth)}}, label, el("span", {class: "track"}, el("span", {class: "bar"})));
    row.addEventListener("click", () => { selected = s.id; showDetails(s.id); draw(); });
    return row;
  });
  const node = el("details", {class: "interaction", dataset: {trace: trace.id}, open},
    head, el("div", {class: "rows"}, ...rows));
  node.addEventListener("toggle", () => expanded.set(trace.id, node.open));
  layout(node, trace);
  return node;
}

// Place each bar on its interaction's time axis; running spans reach now.
function layout(node, trace) {
  const start = trace.start;
  const end = Math.max(...trace.list.map(endOf));
  const width = Math.max(end - start, 1);
  for (const row of node.querySelectorAll(".span")) {
    const s = spans.get(row.dataset.spanId);
    if (!s) continue;
    const bar = row.querySelector(".bar");
    const stop = endOf(s);
    bar.style.left = `${((s.start_ms - start) / width) * 100}%`;
    bar.style.width = `${Math.max(((stop - s.start_ms) / width) * 100, 0.3)}%`;
    row.querySelector(".dur").textContent = ` ${tookText(s)}${s.running && isLive() ? "\u2026" : ""}`;
    const waited = row.querySelector(".waited");
    if (waited) waited.textContent = `waiting ${fmtDuration(serverNow() - s.start_ms)}`;
  }
  const total = node.querySelector(".trace-duration");
  if (total) total.textContent = fmtDuration(end - start);
}

function draw() {
  const waiting = waitedOn();
  const all = traces();
  const container = document.getElementById("waterfall");
  const nodes = all.map((trace, index) => {
    const sig = JSON.stringify([trace.list.length, trace.list.map((s) => s.running ? s.id : s.end_ms).join(),
      waiting, selected, session.state, traceUrl, index, all.length]);
    const known = rendered.get(trace.id);
    if (known && known.sig === sig) return known.node;
    const node = renderTrace(trace, index, all.length, waiting);
    rendered.set(trace.id, {sig, node});
    return node;
  });
  container.replaceChildren(...nodes);
  if (!nodes.length) container.replaceChildren(el("p", {class: "empty"}, "No interaction yet."));
}

function showDetails(id) {
  const s = spans.get(id);
  const panel = document.getElementById("details");
  if (!s) { panel.hidden = true; document.body.classList.remove("with-details"); return; }
  document.getElementById("details-name").textContent = s.name;
  // A running span has no status yet: "running", not "unset (running)".
  const status = s.running ? (isLive() ? "running" : "never ended") : s.status;
  const rows = [["status", status],
    ["status message", s.message], ["start", fmtTime(s.start_ms)], ["duration", tookText(s)],
    ["trace id", s.trace], ["span id", s.id], ["parent span id", s.parent]];
  for (const key of Object.keys(s.attrs).sort()) {
    const value = s.attrs[key];
    rows.push([key, typeof value === "object" ? JSON.stringify(value) : value]);
  }
  for (const e of s.events) rows.push([`event ${e.name}`, `${fmtTime(e.t_ms)} ${JSON.stringify(e.attrs)}`]);
  document.querySelector("#details-table tbody").replaceChildren(...rows
    .filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, el("pre", {}, String(v))))));
  panel.hidden = false;
  document.body.classList.add("with-details");
}

document.getElementById("close-details").addEventListener("click", () => {
  selected = null; document.getElementById("details").hidden = true; document.body.classList.remove("with-details");
  draw();
});

function onData(data) {
  merge(data);
  if (!session) return;
  facts();
  draw();
  if (selected) showDetails(selected);
  tickRelativeTimes();
}

// Open spans grow between messages.
setInterval(() => {
  if (!session) return;
  tickRelativeTimes();
  if (!isLive()) return;
  for (const [id, {node}] of rendered) {
    const list = [...spans.values()].filter((s) => s.trace === id);
    if (list.some((s) => s.running)) layout(node, {start: Math.min(...list.map((s) => s.start_ms)), list});
  }
}, 250);

// No session of that id: a unique start of one goes to it; else the page says so and leads back.
function missing(answer) {
  if (answer.matches && answer.matches.length === 1) {
    location.replace(`/session/${encodeURIComponent(answer.matches[0])}`);
    return;
  }
  document.title = `copilot-otel: ${answer.error}`;
  document.body.replaceChildren(el("main", {}, el("h1", {}, answer.error),
    el("p", {}, el("a", {href: "/", id: "back"}, "All sessions"))));
}

document.getElementById("sid").textContent = sessionId;
follow(() => {
  const base = `/api/session/${encodeURIComponent(sessionId)}/stream`;
  if (!position) return base;
  return `${base}?${new URLSearchParams({since: String(position.next), token: position.token})}`;
}, onData, missing);
