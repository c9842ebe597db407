// The sessions page: every known session, live ones first, grouped by state; pushed by the server.
"use strict";

const query = new URLSearchParams(location.search);
const filters = {
  state: query.get("state") || "",
  repository: query.get("repository") || "",
  offset: Number(query.get("offset")) || 0,
};
let source = null;
let lastPage = null;

function queryString() {
  const q = new URLSearchParams();
  if (filters.state) q.set("state", filters.state);
  if (filters.repository) q.set("repository", filters.repository);
  if (filters.offset) q.set("offset", String(filters.offset));
  return q.toString();
}

function connect() {
  if (source) source.close();
  const qs = queryString();
  history.replaceState(null, "", qs ? `/?${qs}` : "/");
  source = follow(`/api/sessions/stream${qs ? `?${qs}` : ""}`, render);
}

function fillSelect(select, entries, current, label) {
  const options = [el("option", {value: ""}, label)];
  for (const [value, count] of entries) {
    if (!value) continue;  // sessions outside a repository: no filter of their own
    options.push(el("option", {value, selected: value === current}, `${value || "(none)"} (${count})`));
  }
  if (current && !entries.some(([value]) => value === current)) {
    options.push(el("option", {value: current, selected: true}, `${current} (0)`));
  }
  select.replaceChildren(...options);
}

function creditsTitle(s) {
  if (!s.credits_status) return "";
  return s.nano_aiu === null ? `no call reported an amount (${s.credits_status})` : `${s.nano_aiu} nano AIU (${s.credits_status})`;
}

// The repository filter: each repository, then the sessions in none ("none"), then each of their folders.
function fillPlaces(select, data, current) {
  const option = (value, text) => el("option", {value, selected: value === current}, text);
  const options = [option("", "all repositories")];
  let known = current === "";
  for (const [value, count] of Object.entries(data.repositories)) {
    if (!value) continue;
    options.push(option(value, `${value} (${count})`));
    known = known || value === current;
  }
  const outside = data.repositories[""] || 0;
  options.push(option("none", `no repository (${outside})`));
  known = known || current === "none";
  const folders = Object.entries(data.folders || {}).filter(([value]) => value);
  if (folders.length) {
    options.push(el("optgroup", {label: "folders outside a repository"},
      ...folders.map(([value, count]) => option(value, `${value} (${count})`))));
    known = known || folders.some(([value]) => value === current);
  }
  if (!known) options.push(option(current, `${current} (0)`));
  select.replaceChildren(...options);
}

function row(s) {
  const link = el("a", {href: `/session/${encodeURIComponent(s.id)}`, title: s.id}, s.id.slice(0, 8));
  const name = s.name ? el("span", {class: "name dim", title: s.name}, " ", s.name) : "";
  const place = s.repository ? el("span", {}, ...slashBreaks(s.repository))
    : el("span", {class: "folder dim", title: s.cwd || ""}, ...slashBreaks(s.cwd));
  const asking = s.state === "waiting_user" && s.asking;  // a person is asked: no fault, and no tool's time
  const waiting = asking
    ? el("span", {}, `asks ${s.asking} `, el("span", {class: "dim", dataset: {since: s.asking_since_ms}}))
    : s.waiting_on
    ? el("span", {}, s.waiting_on, " ", el("span", {class: "dim", dataset: {since: s.waiting_since_ms}}))
    : "";
  const last = el("td", {title: fmtTime(s.last_ms)}, el("span", {dataset: {ago: s.last_ms}}, fmtAgo(s.last_ms)));
  const tr = el("tr", {class: `session state-${s.state}`, dataset: {id: s.id, state: s.state}},
    el("td", {}, badge(s.state), s.stalled_since_ms ? el("span", {class: "dim"}, " ",
      el("span", {class: "stalled", dataset: {since: s.stalled_since_ms}}, fmtDuration(serverNow() - s.stalled_since_ms))) : ""),
    el("td", {class: "session-id"}, el("span", {class: "mono"}, link), name),
    el("td", {class: "place"}, place),
    el("td", {class: "mono branch"}, ...slashBreaks(s.branch)),
    el("td", {}, s.model || ""),
    last,
    el("td", {class: "mono"}, waiting),
    el("td", {class: "num"}, fmtNumber(s.turns)),
    el("td", {class: "num", title: `${s.input_tokens} in, ${s.output_tokens} out`}, fmtNumber(s.tokens)),
    // No amount is "-", as `sessions` prints it; an unknown one "unknown", a partly known one "8.67+".
    el("td", {class: "num"}, s.premium_requests ? s.premium_requests : "-"),
    el("td", {class: "num credits", title: creditsTitle(s)}, fmtCredits(s) || "-"));
  tr.addEventListener("click", (event) => {
    if (event.target.tagName !== "A") location.href = link.href;
  });
  return tr;
}

// Each budget of --budgets-file: this machine's part of it this month (Prometheus holds the fleet's).
function renderBudgets(budgets) {
  const section = document.getElementById("budgets");
  section.hidden = !budgets || budgets.length === 0;
  if (section.hidden) return;
  section.replaceChildren(el("h2", {}, "AI-credit budgets this month (this machine)"), ...budgets.map((b) => {
    const spent = b.nano_aiu / 1e9;
    const scope = [b.repository && `repositories ${b.repository}`, b.user && `user ${b.user}`, b.team && `team ${b.team}`]
      .filter(Boolean).join(", ") || "everything";
    const level = b.share >= 1 ? "over" : b.share >= b.warn_at ? "warn" : "ok";
    return el("div", {class: `budget budget-${level}`, dataset: {budget: b.name}},
      el("span", {class: "budget-name"}, b.name),
      el("progress", {max: 1, value: Math.min(b.share, 1), title: `warns at ${Math.round(b.warn_at * 100)}%`}),
      el("span", {class: "budget-figures"}, b.this_machine
        ? `${spent.toFixed(2)} of ${b.ai_credits} AI credits (${Math.round(b.share * 100)}%)`
        : `not this machine's (${scope})`),
      el("span", {class: "dim"}, ` ${scope}`));
  }), el("p", {class: "budget-note dim"}, "From this machine's session logs, this month. The metric "
    + "copilot_budget_ai_credits_spent_total counts from the daemon's start (a restart begins it at 0); "
    + "Prometheus' copilot:budget_ai_credits:month_to_date adds up the fleet's increases."));
}

function render(data) {
  lastPage = data;
  renderBudgets(data.budgets);
  const states = Object.entries(data.states).filter(([, n]) => n > 0);
  const shown = Object.values(data.states).reduce((a, n) => a + n, 0);
  document.getElementById("counts").replaceChildren(
    filters.repository ? `${shown} of ${data.total} sessions: ` : `${data.total} sessions: `,
    ...states.flatMap(([state, n]) => [badge(state), ` ${n} `]));
  fillSelect(document.getElementById("state"), Object.entries(data.states).map(([k, n]) => [k, n])
    .filter(([, n]) => n > 0), filters.state, "all states");
  for (const option of document.getElementById("state").options) {
    if (option.value) option.textContent = `${STATE_LABELS[option.value] || option.value} (${data.states[option.value] || 0})`;
  }
  fillPlaces(document.getElementById("repository"), data, filters.repository);
  const rows = [];
  let group = null;
  for (const s of data.sessions) {
    if (s.state !== group) {
      group = s.state;
      rows.push(el("tr", {class: "group", dataset: {group}}, el("th", {colspan: 11}, badge(group),
        ` ${data.states[group] || 0}`)));
    }
    rows.push(row(s));
  }
  document.querySelector("#sessions tbody").replaceChildren(...rows);
  const empty = document.getElementById("empty");
  empty.textContent = data.problem ? `No sessions can be seen: ${data.problem}` : "No session matches.";
  empty.hidden = data.sessions.length > 0;
  document.getElementById("legend").hidden = !data.sessions.some((s) => creditsNoted(fmtCredits(s)));
  const end = data.offset + data.sessions.length;
  document.getElementById("range").textContent =
    data.matching ? `${data.offset + 1}\u2013${end} of ${data.matching}` : "0 of 0";
  document.getElementById("prev").disabled = data.offset <= 0;
  document.getElementById("next").disabled = end >= data.matching;
  tickRelativeTimes();
}

document.getElementById("state").addEventListener("change", (event) => {
  filters.state = event.target.value; filters.offset = 0; connect();
});
document.getElementById("repository").addEventListener("change", (event) => {
  filters.repository = event.target.value; filters.offset = 0; connect();
});
document.getElementById("prev").addEventListener("click", () => {
  filters.offset = Math.max(0, filters.offset - (lastPage ? lastPage.limit : 100)); connect();
});
document.getElementById("next").addEventListener("click", () => {
  filters.offset += lastPage ? lastPage.limit : 100; connect();
});
setInterval(() => tickRelativeTimes(), 1000);
connect();
