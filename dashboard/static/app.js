// The dashboard's page: polls /api/state and /api/history every second
// and redraws. Data is written with textContent only, never as HTML.
"use strict";

const every = 1000;
const hour = 3600 * 1000;
const hostsShown = 25;
const token = new URLSearchParams(location.search).get("token");
let history = [];
let lastT = 0;

function api(path, opts) {
  opts = opts || {};
  opts.headers = Object.assign({}, opts.headers);
  if (token) opts.headers["Authorization"] = "Bearer " + token;
  return fetch(path, opts).then(r => {
    if (!r.ok) return r.text().then(t => { throw new Error(r.status + ": " + t.trim()); });
    return r.json();
  });
}

const $ = id => document.getElementById(id);
const fmt = n => (n === undefined || n === null) ? "–" : Number(n).toLocaleString("en-US");
const rate = n => n.toFixed(n >= 10 ? 0 : 1);

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s ago";
  return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m ago";
}

function duration(sec) {
  sec = Math.round(sec);
  if (sec < 60) return sec + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m " + (sec % 60) + "s";
  return Math.floor(sec / 3600) + "h " + Math.floor(sec % 3600 / 60) + "m";
}

function delay(ms) {
  if (ms === undefined || ms === null || ms < 0) return "–";
  return ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
}

function row(cells, cls) {
  const tr = document.createElement("tr");
  if (cls) tr.className = cls;
  for (const c of cells) {
    const td = document.createElement("td");
    if (typeof c === "object" && c !== null) {
      td.textContent = c.text;
      if (c.cls) td.className = c.cls;
    } else td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows, empty, columns) {
  const tb = $(tableId).tBodies[0];
  tb.replaceChildren(...rows);
  if (rows.length === 0 && empty) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = columns;
    td.textContent = empty;
    tr.appendChild(td);
    tb.appendChild(tr);
  }
}

function render(s) {
  $("error").hidden = !s.error;
  $("error").textContent = s.error ? "reading the crawl failed: " + s.error : "";
  const st = $("status");
  st.className = "badge " + s.status;
  st.textContent = s.status === "stalled" ? "stalled for " + duration(s.stalled_for_seconds) : s.status;
  $("eta").textContent = s.eta_seconds ? "ETA " + duration(s.eta_seconds) : "";
  $("updated").textContent = s.time ? "updated " + new Date(s.time).toLocaleTimeString() : "";
  $("updated").dataset.time = s.time || "";

  const t = s.totals;
  $("t-pages").textContent = fmt(t.pages);
  $("t-items").textContent = fmt(t.items);
  $("t-errors").textContent = fmt(t.errors);
  $("t-kinds").textContent = Object.keys(t.errors_by_kind || {}).sort().map(k => k + " " + fmt(t.errors_by_kind[k])).join(", ");
  $("t-retries").textContent = fmt(t.retries);
  $("t-dead").textContent = fmt(t.dead_letters);
  const workers = s.workers || [];
  $("t-workers").textContent = workers.filter(w => w.state === "running").length + (workers.length ? " / " + workers.length : "");

  fill("workers", workers.map(w => {
    const r = row([{ text: w.state, cls: "state" }, w.host, String(w.pid), w.version,
      { text: rate(w.pages_per_sec), cls: "n" }, { text: fmt(w.pages), cls: "n" }, { text: fmt(w.in_flight), cls: "n" },
      ago(Date.parse(w.heartbeat))], w.state);
    r.dataset.pid = w.pid;
    return r;
  }), "no worker has announced itself", 8);

  const hosts = s.hosts || [];
  fill("hosts", hosts.slice(0, hostsShown).map(h => {
    const r = row([h.host, { text: fmt(h.pages) + (h.untallied ? " (+≤" + fmt(h.untallied) + ")" : ""), cls: "n" },
      { text: fmt(h.errors), cls: "n" + (h.errors ? " bad" : "") }, { text: delay(h.delay_ms), cls: "n" }, { text: String(h.workers), cls: "n" }]);
    r.dataset.host = h.host;
    r.dataset.pages = h.pages;
    r.dataset.errors = h.errors;
    r.dataset.delayMs = h.delay_ms;
    return r;
  }), "no host fetched yet (workers report theirs every 5 s)", 5);
  $("hosts-note").textContent = hosts.length > hostsShown ? "(the top " + hostsShown + " of " + hosts.length + " by pages)" : "";

  fill("queues", (s.queues || []).map(q => row([q.name, { text: fmt(q.ready), cls: "n" }, { text: fmt(q.in_flight), cls: "n" },
    { text: q.delayed < 0 ? "–" : fmt(q.delayed), cls: "n" }, { text: fmt(q.dead), cls: "n" }])), "no queue counts", 5);

  fill("deadletters", (s.dead_letters || []).map(d => row([d.queue, d.what, d.reason])), "none", 3);
  $("requeue").hidden = !(s.can_requeue && (s.dead_letters || []).length > 0);
  $("pause").hidden = !s.can_pause || s.paused;
  $("resume").hidden = !s.can_pause || !s.paused;

  $("settings").textContent = s.settings ? JSON.stringify(s.settings, null, 2) : "none stored";

  const keys = Object.keys(s.stats || {}).sort();
  fill("stats", keys.map(k => {
    const r = row([k, fmt(s.stats[k])]);
    r.dataset.key = k;
    r.dataset.value = s.stats[k];
    return r;
  }), "no counters yet", 2);
}

function chart(svgId, axisId, series) {
  const svg = $(svgId);
  const now = history.length ? history[history.length - 1].t : Date.now();
  const from = Math.max(history.length ? history[0].t : now, now - hour);
  const span = Math.max(now - from, 60 * 1000);
  let top = 1;
  for (const p of history) for (const s of series) top = Math.max(top, p[s.key]);
  const lines = series.map(s => {
    const pts = history.filter(p => p[s.key] >= 0).map(p =>
      ((p.t - (now - span)) / span * 600).toFixed(1) + "," + (158 - p[s.key] / top * 154).toFixed(1));
    const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    pl.setAttribute("class", s.cls);
    pl.setAttribute("points", pts.join(" "));
    return pl;
  });
  svg.replaceChildren(...lines);
  const ax = $(axisId);
  const left = document.createElement("span");
  left.textContent = duration(span / 1000) + " ago";
  const right = document.createElement("span");
  right.textContent = "max " + (top >= 10 ? fmt(Math.round(top)) : top.toFixed(1));
  ax.replaceChildren(left, right);
}

function drawCharts() {
  chart("chart-rates", "axis-rates", [
    { key: "pages_per_sec", cls: "pages" }, { key: "items_per_sec", cls: "items" }, { key: "errors_per_sec", cls: "errors" }]);
  chart("chart-queues", "axis-queues", [
    { key: "ready", cls: "ready" }, { key: "in_flight", cls: "inflight" }, { key: "delayed", cls: "delayed" }, { key: "dead", cls: "dead" }]);
}

function tick() {
  Promise.all([
    api("api/state").then(render),
    api("api/history?since=" + lastT).then(ps => {
      if (ps.length) {
        history = history.concat(ps);
        lastT = ps[ps.length - 1].t;
        const cut = lastT - hour;
        history = history.filter(p => p.t >= cut);
      }
      drawCharts();
    }),
  ]).catch(err => {
    $("error").hidden = false;
    $("error").textContent = "the dashboard is unreachable: " + err.message;
  }).finally(() => setTimeout(tick, every));
}

$("requeue").addEventListener("click", () => {
  $("requeue").disabled = true;
  api("api/requeue", { method: "POST" }).then(r => {
    $("requeued").textContent = "requeued " + fmt(r.requeued);
  }).catch(err => {
    $("requeued").textContent = err.message;
  }).finally(() => { $("requeue").disabled = false; });
});

for (const [id, path] of [["pause", "api/pause"], ["resume", "api/resume"]]) {
  $(id).addEventListener("click", () => {
    $(id).disabled = true;
    api(path, { method: "POST" }).then(() => api("api/state")).then(render).catch(err => {
      $("error").hidden = false;
      $("error").textContent = err.message;
    }).finally(() => { $(id).disabled = false; });
  });
}

tick();
