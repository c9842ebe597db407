// Shared by both pages. Every value from a session log goes into the page as text
// (textContent, or an attribute set through the DOM), never as markup.
"use strict";

// The view's token. `copilot-otel open` lands here with it in the fragment (#token=...), which the browser
// never sends anywhere; it is kept in this origin's localStorage (scheme, host and port: a page of another
// port cannot read it) and sent only by these scripts, in the X-Copilot-Otel-Token header, to this origin.
// No cookie: the browser attaches nothing by itself to a request, so a server on another port gets nothing.
// A page of any site can send this browser to /#token=..., too: a token from the fragment replaces the kept one
// only once the server has taken it; a wrong one is dropped, said, and the kept one goes on working.
const TOKEN_KEY = "copilot-otel-token";
const TOKEN_REFUSED = "The token in this link was refused (not this view's): this page goes on with the token " +
  "it kept. Run `copilot-otel open` for a link of its own.";
const TOKEN_UNCHECKED = "The token in this link could not be checked: this page goes on with the token it kept.";

function fragmentToken() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) history.replaceState(null, "", location.pathname + location.search);  // out of the address bar
  return given;
}

// Keep `candidate` if the server takes it; true if kept.
async function adopt(candidate) {
  let response;
  try {
    response = await fetch("/api/sessions?limit=1", {headers: {"X-Copilot-Otel-Token": candidate},
      cache: "no-store"});
  } catch (error) {
    notice(TOKEN_UNCHECKED);
    return false;
  }
  if (response.ok) {
    localStorage.setItem(TOKEN_KEY, candidate);
    return true;
  }
  notice(response.status === 401 ? TOKEN_REFUSED : `${TOKEN_UNCHECKED} (HTTP ${response.status})`);
  return false;
}

function notice(text) {
  let node = document.getElementById("token-notice");
  if (!node) {
    node = el("p", {id: "token-notice", class: "notice", role: "alert"});
    document.body.prepend(node);
  }
  node.textContent = text;
}

const offered = fragmentToken();
// Settled once a token from the fragment is kept or dropped: the streams ask only then.
const tokenSettled = offered ? adopt(offered) : Promise.resolve(false);
// A URL with a new token pasted into this tab changes only the fragment: no new page load, so look again.
window.addEventListener("hashchange", async () => {
  const given = fragmentToken();
  if (given && await adopt(given)) location.reload();
});

function authorization() {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? {"X-Copilot-Otel-Token": token} : {};
}

const NEEDS_TOKEN = "this page needs its token: run `copilot-otel open` (as the user who runs the daemon)";

const STATE_LABELS = {
  stuck: "stuck", abandoned: "abandoned", waiting_user: "waiting for the user", working: "working",
  waiting_tool: "waiting on a tool", idle: "idle", ended: "ended",
};

// el("td", {class: "num", title: "x"}, "text", otherNode): an element; strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Text that may wrap only after a "/" or a "-" (a branch, a repository, a folder), never inside a word: its parts,
// each kept whole (class "part"), a <wbr> between them.
function slashBreaks(text) {
  if (!text) return [];
  const parts = String(text).split(/(?<=[/-])/);
  return parts.flatMap((part, i) => [i ? el("wbr", {}) : null, el("span", {class: "part"}, part)]).filter(Boolean);
}

// AI credits (1 credit = 1e9 nano AIU): "8.67+" when some calls reported no amount (the sum is not the whole
// cost), "unknown" when none did (zero would be no zero cost); "" with no call yet.
function fmtCredits(s) {
  if (!s.nano_aiu && !s.credits_status) return "";
  const partial = s.credits_status === "partial" || s.credits_status === "unavailable";
  if (partial && !s.nano_aiu) return "unknown";
  const text = s.nano_aiu && s.nano_aiu < 1e7 ? "<0.01" : (s.nano_aiu / 1e9).toFixed(2);
  return text + (partial ? "+" : "");
}
function creditsNoted(text) { return text === "unknown" || text.endsWith("+"); }

// Server time minus ours, from the last message (the page may run on another machine).
let clockSkew = 0;
function serverNow() { return Date.now() + clockSkew; }
function noteServerTime(ms) { if (typeof ms === "number") clockSkew = ms - Date.now(); }

function fmtDuration(ms) {
  if (!(ms >= 0)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function fmtAgo(ms) {
  if (!ms) return "";
  const elapsed = serverNow() - ms;
  return elapsed < 1000 ? "just now" : `${fmtDuration(elapsed)} ago`;
}

function fmtTime(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString();
}

function fmtNumber(n) {
  if (typeof n !== "number") return "";
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(0)}k`;
  return n.toLocaleString();
}

function badge(state) {
  return el("span", {class: `badge state-${state}`}, STATE_LABELS[state] || state);
}

// Refresh every element that shows a time relative to now (data-ago, data-since).
function tickRelativeTimes(root) {
  for (const node of (root || document).querySelectorAll("[data-ago]")) {
    node.textContent = fmtAgo(Number(node.dataset.ago));
  }
  for (const node of (root || document).querySelectorAll("[data-since]")) {
    node.textContent = fmtDuration(serverNow() - Number(node.dataset.since));
  }
}

// Follows a stream of Server-Sent Events, calling onData(parsed JSON) for each message, and keeps #status
// true. A stream that fails or is refused (the server caps the live views it serves at once) is opened again
// after 1 s, then 2, 4, ... up to 30 s, each wait cut by a random part of up to half (so that pages refused
// together do not come back together); a message resets it. `url` is a string, or a function called for each
// attempt (the session page asks from where it stopped). Without the right token (401) it stops and says how to
// get in; onMissing(answer) is called instead of retrying when the server says there is no such thing (404).
// The stream is read with fetch (EventSource cannot send the token in a header). Returns {close()}.
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30000;

function follow(url, onData, onMissing) {
  const status = document.getElementById("status");
  let controller = null;
  let delay = 0;
  let timer = null;
  let ticker = null;
  let closed = false;
  const show = (text, className) => { status.textContent = text; status.className = `status ${className}`; };

  function message(block) {
    const data = block.split("\n").filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(line[5] === " " ? 6 : 5)).join("\n");
    if (!data) return;  // a comment (heartbeat) or a retry hint
    delay = 0;
    const parsed = JSON.parse(data);
    if (parsed.problem) show(parsed.problem, "down"); else show("live", "live");
    noteServerTime(parsed.now_ms);
    onData(parsed);
  }

  async function read(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        message(block);
      }
    }
  }

  async function open() {
    timer = null;
    clearInterval(ticker);
    await tokenSettled;
    if (closed) return;
    controller = new AbortController();
    try {
      const response = await fetch(typeof url === "function" ? url() : url, {
        headers: {Accept: "text/event-stream", ...authorization()}, signal: controller.signal,
        cache: "no-store"});
      if (response.status === 401) { show(NEEDS_TOKEN, "down"); return; }
      if (response.status === 404 && onMissing) { onMissing(await response.json()); show("", "down"); return; }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      show("live", "live");
      await read(response);
    } catch (error) {
      if (closed) return;
    }
    if (!closed) retry();
  }

  function retry() {
    delay = delay ? Math.min(delay * 2, RETRY_MAX_MS) : RETRY_FIRST_MS;
    const wait = delay * (1 - Math.random() / 2);
    const at = Date.now() + wait;
    const say = () => show(`disconnected; retrying in ${Math.max(1, Math.ceil((at - Date.now()) / 1000))} s\u2026`,
      "down retrying");
    say();
    ticker = setInterval(say, 1000);
    timer = setTimeout(open, wait);
  }

  show("connecting\u2026", "down");
  open();
  return {
    close() {
      closed = true;
      if (controller) controller.abort();
      clearTimeout(timer);
      clearInterval(ticker);
    },
  };
}
