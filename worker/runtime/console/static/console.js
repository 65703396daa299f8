// The queueworker console: polls the JSON under /console/api/ and draws the views with DOM calls only
// (textContent, never innerHTML): message bodies and reasons are untrusted text.
"use strict";

const STATE_EVERY = 3000;
const HISTORY_EVERY = 10000;
const TOKEN_KEY = "queueworker-console-token";
const SVG = "http://www.w3.org/2000/svg";
const COLORS = { depth: "#2e5bdb", inFlight: "#9e77ed", received: "#2e5bdb", succeeded: "#067647",
                 failed: "#b42318", poisoned: "#b54708", p50: "#2e5bdb", p95: "#b54708" };
const CHARTS = [["depth", ["depth", "inFlight"], ""], ["rate", ["received", "succeeded", "failed"], "/s"],
                ["latency", ["p50", "p95"], " ms"]];

let history = null;
let lastState = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function replace(container, ...children) {
  container.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function call(path, options) {
  const headers = Object.assign({}, (options || {}).headers);
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const error = new Error((body && body.error) || response.statusText || "request failed");
    error.status = response.status;
    throw error;
  }
  return body;
}

function showProblem(text) {
  const banner = document.getElementById("problem");
  banner.textContent = text || "";
  banner.hidden = !text;
}

function showAction(text, bad) {
  const banner = document.getElementById("action-status");
  banner.textContent = text;
  banner.className = bad ? "banner" : "banner info";
  banner.hidden = false;
}

function number(value, digits) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 2 : digits });
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 90) return number(value, 1) + " s";
  if (value < 5400) return number(value / 60, 1) + " min";
  return number(value / 3600, 1) + " h";
}

function stat(label, value, field) {
  return el("div", { class: "stat" }, el("b", { "data-field": field, text: value }), el("span", { text: label }));
}

function chart(name, fields, unit, series) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 300 56");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", name + " over the last hour");
  let top = 0;
  const times = series ? series.t : [];
  for (const field of fields) for (const v of (series && series[field]) || []) if (v !== null && v > top) top = v;
  // The last hour, or what there is of it: a host up for a minute draws its minute across the chart.
  const end = times.length ? times[times.length - 1] : 0;
  const start = times.length ? Math.max(times[0], end - 3600) : 0;
  const span = Math.max(end - start, 1);
  for (const field of fields) {
    const values = (series && series[field]) || [];
    let points = [];
    const lines = [];
    values.forEach((v, i) => {
      if (v === null || times[i] < start) { if (points.length) lines.push(points); points = []; return; }
      const x = ((times[i] - start) / span) * 300;
      const y = 54 - (top > 0 ? (v / top) * 50 : 0);
      points.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    if (points.length) lines.push(points);
    for (const line of lines) {
      const shape = document.createElementNS(SVG, line.length > 1 ? "polyline" : "circle");
      if (line.length > 1) {
        shape.setAttribute("points", line.join(" "));
        shape.setAttribute("fill", "none");
        shape.setAttribute("stroke", COLORS[field]);
        shape.setAttribute("stroke-width", "1.5");
        shape.setAttribute("vector-effect", "non-scaling-stroke");
      } else {
        const [x, y] = line[0].split(",");
        shape.setAttribute("cx", x); shape.setAttribute("cy", y); shape.setAttribute("r", "1.5");
        shape.setAttribute("fill", COLORS[field]);
      }
      svg.append(shape);
    }
  }
  const legend = el("span", { class: "legend" }, ...fields.flatMap((f) => [el("i", { style: null }), f]));
  legend.querySelectorAll("i").forEach((i, n) => { i.style.background = COLORS[fields[n]]; });
  return el("div", { class: "chart", "data-chart": name },
    el("div", { class: "label" }, el("span", {}, name, legend),
       el("span", { text: "max " + number(top) + unit + " · last " + seconds(span) })),
    svg);
}

function drawFunctions(state) {
  const cards = state.functions.map((f) => {
    const d = f.depth || {};
    const depth = d.total === null || d.total === undefined ? (d.error ? "error" : "–") : number(d.total, 0);
    const split = d.visible !== null && d.visible !== undefined
      ? number(d.visible, 0) + " visible / " + number(d.invisible, 0) + " invisible" : "visible/invisible: not told";
    const series = history && history.functions ? history.functions[f.name] : null;
    return el("article", { class: "card", "data-function": f.name },
      el("h3", { text: f.name }),
      el("div", { class: "muted", text: "queue " + f.queue + " · " + f.storage + " · " + f.handler }),
      el("div", { class: "stats" },
        stat("depth (" + split + ")", depth, "depth"),
        stat("held here", number(f.held, 0), "held"),
        stat("concurrency (" + f.concurrency.limitFrom + ")", f.concurrency.inUse + " / " + f.concurrency.limit,
             "concurrency"),
        stat("received /s", number(f.rates.received, 3), "received-rate"),
        stat("succeeded /s", number(f.rates.succeeded, 3), "succeeded-rate"),
        stat("failed /s", number(f.rates.failed, 3), "failed-rate"),
        stat("poisoned /s", number(f.rates.poisoned, 3), "poisoned-rate"),
        stat("p50 / p95 / p99 ms", [f.times.p50, f.times.p95, f.times.p99].map((v) => number(v, 1)).join(" / "),
             "times"),
        stat("received · succeeded · failed", [f.totals.received, f.totals.succeeded, f.totals.failed].join(" · "),
             "totals")),
      d.error ? el("div", { class: "muted", text: "depth: " + d.error }) : null,
      ...CHARTS.map(([name, fields, unit]) => chart(name, fields, unit, series)));
  });
  replace(document.getElementById("function-cards"), ...cards);
}

function drawLeases(state) {
  const leases = state.leases;
  document.getElementById("lease-count").textContent =
    leases.total > leases.shown.length ? leases.total + " held, the oldest " + leases.shown.length + " shown"
                                        : leases.total + " held";
  const rows = leases.shown.map((l) => el("tr", { class: l.long ? "long" : null, "data-message-id": l.messageId,
                                                  title: l.long ? "held longer than its lease: renewals keep it" : null },
    el("td", { text: l.function + (l.process !== undefined ? " #" + l.process : "") }),
    el("td", { class: "id", text: l.messageId }),
    el("td", { "data-field": "dequeueCount", text: l.dequeueCount }),
    el("td", { "data-field": "age", text: seconds(l.ageSeconds) }),
    el("td", { "data-field": "renewals", text: l.renewals }),
    el("td", { "data-field": "next-renewal", text: "in " + seconds(l.nextRenewalSeconds) }),
    el("td", { class: "id", text: (l.sparkTags || []).join(", ") || "–" })));
  replace(document.querySelector("#lease-table tbody"), ...rows);
}

function drawFailures(state) {
  const rows = state.failures.map((f) => el("tr", { "data-message-id": f.messageId },
    el("td", { text: f.at }), el("td", { text: f.function }), el("td", { class: "id", text: f.messageId }),
    el("td", { class: "id", text: f.invocationId }), el("td", { text: f.dequeueCount }),
    el("td", { text: f.outcome }), el("td", {}, el("pre", { class: "body", text: f.reason }))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, class: "muted", text: "none since start" })));
  replace(document.querySelector("#failure-table tbody"), ...rows);
}

async function act(poison, action, messageId) {
  const what = action === "purge" ? "Delete every poison message of " + poison.function + " for good?"
    : action === "requeue-all" ? "Move every poison message of " + poison.function + " back to " + poison.queue + "?"
    : "Move message " + messageId + " back to " + poison.queue + "?";
  if (!window.confirm(what)) return;
  try {
    const done = await call("/console/api/poison/" + encodeURIComponent(poison.function) + "/" + action, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(messageId ? { messageId } : {}) });
    showAction(done.running ? action + " started, function " + poison.function + ": its progress shows below"
      : action + ": " + done.messages + " message(s), function " + poison.function, false);
  } catch (error) {
    showAction(action + " refused (" + (error.status || "no answer") + "): " + error.message, true);
  }
  refresh();
}

function bulkLine(a) {
  if (!a) return null;
  const most = a.most === null ? "?" : a.most;
  const text = a.running ? a.action + " running: " + a.messages + " of at most " + most + " message(s)"
    : a.action + (a.error ? " failed after " + a.messages + " message(s): " + a.error
                          : " done: " + a.messages + " message(s)") + ", " + a.endedAt;
  return el("div", { class: "muted", "data-field": "poison-action", text });
}

function drawPoison(state) {
  const actions = state.facts.actions;
  const cards = state.poison.map((p) => {
    const bulk = (state.poisonActions || []).find((a) => a.function === p.function);
    const busy = Boolean(bulk && bulk.running);
    const can = actions && p.canRequeue && !busy;
    const note = !actions ? "actions need the endpoint token (WORKER_HTTP_TOKEN or worker.httpTokenFile)"
      : p.deadLetter ? "the service's dead-letter queue: its API counts it but cannot show or requeue it" : null;
    let list = null;
    if (p.messages && !p.messages.length) list = el("div", { class: "muted", text: "no poison messages" });
    else if (p.messages) {
      list = el("div", { class: "scroll" }, el("table", {},
        el("thead", {}, el("tr", {}, ...["message id", "attempts", "last failure", "inserted", "body", ""].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...p.messages.map((m) => el("tr", { "data-message-id": m.id },
          el("td", { class: "id", text: m.id }), el("td", { "data-field": "attempts", text: m.attempts ?? "?" }),
          el("td", { "data-field": "lastFailure", text: m.lastFailure ?? "not kept by this backend (see the log)" }),
          el("td", { text: m.inserted }),
          el("td", {}, el("pre", { class: "body", text: m.body + (m.truncated ? " …" : "") })),
          el("td", {}, el("button", { type: "button", "data-action": "requeue", disabled: !can,
                                       onclick: () => act(p, "requeue", m.id), text: "Requeue" })))))));
    }
    return el("article", { class: "card", "data-poison": p.function },
      el("h3", { text: p.function }),
      el("div", { class: "muted", text: p.where || p.queue }),
      p.error ? el("div", { class: "muted", text: "cannot look: " + p.error }) : null,
      el("div", { class: "stats" }, stat("poison messages", number(p.count, 0), "poison-count")),
      note ? el("div", { class: "muted", text: note }) : null,
      bulkLine(bulk),
      el("div", { class: "actions" },
        el("button", { type: "button", "data-action": "requeue-all", disabled: !can || !p.count,
                       onclick: () => act(p, "requeue-all"), text: "Requeue all" }),
        el("button", { type: "button", class: "danger", "data-action": "purge", disabled: !actions || busy || !p.count,
                       onclick: () => act(p, "purge"), text: "Purge" })),
      list || (p.messages === null && !p.deadLetter ? el("div", { class: "muted", text: "this backend cannot peek" }) : null));
  });
  replace(document.getElementById("poison-cards"), ...cards);
}

function drawFacts(state) {
  const f = state.facts;
  const pairs = [
    ["app", f.app], ["settings file", f.settingsFile || "none (defaults)"],
    ["local.settings.json", f.localSettings || "none"], ["processes", f.processes],
    ["pid", Array.isArray(f.pid) ? f.pid.join(", ") : f.pid], ["started", f.startedAt],
    ["storage", f.ready ? "ready" : "not ready: " + f.problems.join("; ")],
    ["poison actions", f.actions ? "on (token set)" : "off (no token set)"],
    ["not run", f.notRun.length ? f.notRun.join("\n") : "none"],
  ];
  const settings = Object.entries(f.settings);
  pairs.push(["settings not at their defaults", settings.length ? settings.map(([k, v]) => k + ": " + v).join("\n") : "none"]);
  for (const fn of state.functions) {
    const own = Object.entries(fn.own || {});
    if (own.length) pairs.push(["functions." + fn.name, own.map(([k, v]) => k + ": " + v).join("\n")]);
  }
  const list = document.getElementById("fact-list");
  replace(list, ...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { "data-fact": k },
    el("pre", { class: "body", text: String(v) }))]));
  const ready = document.getElementById("ready");
  ready.textContent = f.ready ? "ready" : "not ready";
  ready.className = "pill " + (f.ready ? "good" : "bad");
}

async function refresh() {
  try {
    const state = await call("/console/api/state");
    lastState = state;
    showProblem(null);
    drawFunctions(state);
    drawLeases(state);
    drawFailures(state);
    drawPoison(state);
    drawFacts(state);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    showProblem(error.status === 401 ? "This console needs the endpoint token: enter it above."
      : "Cannot read the console's data: " + error.message);
  }
}

async function refreshHistory() {
  try {
    history = await call("/console/api/history");
    if (lastState) drawFunctions(lastState);
  } catch (error) { /* the state poll says what is wrong */ }
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim()); else sessionStorage.removeItem(TOKEN_KEY);
  input.value = "";
  refreshHistory().then(refresh);
});

refreshHistory().then(refresh);
// A tab out of sight asks nothing; it catches up as soon as it is looked at again.
setInterval(() => { if (!document.hidden) refresh(); }, STATE_EVERY);
setInterval(() => { if (!document.hidden) refreshHistory(); }, HISTORY_EVERY);
document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshHistory().then(refresh); });
