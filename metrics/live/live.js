// respmeter's live page: reads /stats?window=W every second and renders it.
// Plain JavaScript, no dependencies; everything is served from the binary.
"use strict";

const phases = ["total", "upstream", "proxy", "service", "queue", "injected", "tls"];
const pcts = ["p50", "p99", "p99.9"];
// The account's parts (split.PartNames), as /stats "parts", the exit's
// "account per request" line and respmeter_verdict_seconds_total name them.
const partNames = ["think", "path", "engine", "queue", "other_clients", "run_queue", "proxy",
  "loop_wait_request", "loop_wait_reply", "injected", "tls"];

const $ = (id) => document.getElementById(id);

// ms formats seconds as milliseconds with 3 decimals.
function ms(sec) { return (sec * 1000).toFixed(3); }

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function commandRow(name, c, cls) {
  const tr = document.createElement("tr");
  tr.dataset.command = name;
  if (cls) tr.className = cls;
  tr.appendChild(cell(name, "name"));
  tr.appendChild(cell(c.rate === undefined ? "–" : c.rate.toFixed(1), "rate"));
  tr.appendChild(cell(String(c.errors), "errors"));
  for (const p of phases) {
    const d = (c.phases || {})[p];
    for (const q of pcts) {
      tr.appendChild(cell(d ? ms(d[q]) : "–", p + "-" + q.replace(".", "")));
    }
  }
  return tr;
}

function renderCommands(doc) {
  const body = $("commands").tBodies[0];
  const rows = [];
  const names = Object.keys(doc.commands || {}).sort(
    (a, b) => (doc.commands[b].rate || 0) - (doc.commands[a].rate || 0) || a.localeCompare(b));
  for (const n of names) rows.push(commandRow(n, doc.commands[n]));
  rows.push(commandRow("Totals", doc.totals, "totals"));
  body.replaceChildren(...rows);
}

function renderShards(doc) {
  const shards = (doc.shards || []).filter((s) => s.total && s.total.p50 > 0 || s.commands > 0);
  // Without routing the one "shard" is the upstream with no latencies of its own.
  const routed = shards.some((s) => s.total.p50 > 0);
  $("shards-section").hidden = !routed;
  if (!routed) return;
  // Each shard's own verdict of its latest interval (its probe and engine
  // poll: /stats "shard_engines"), by address.
  const engines = {};
  for (const e of doc.shard_engines || []) engines[e.shard] = e.verdict;
  const rows = shards.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.shard = s.shard;
    tr.appendChild(cell(s.shard, "name"));
    tr.appendChild(cell(s.rate === undefined ? "–" : s.rate.toFixed(1), "rate"));
    tr.appendChild(cell(String(s.errors), "errors"));
    for (const p of ["total", "upstream"]) {
      for (const q of pcts) tr.appendChild(cell(ms(s[p][q]), p + "-" + q.replace(".", "")));
    }
    const v = engines[s.shard];
    // The shard's account of its latest interval: the parts' names and
    // values of its verdict (engine = its execution in the account).
    tr.appendChild(cell(v && v.engine_known ? ms(v.engine_exec_seconds) : "n/a", "engine"));
    tr.appendChild(cell(v && v.wait_known ? ms(v.engine_wait_seconds) : "n/a", "wait"));
    tr.appendChild(cell(v && v.engine_known ? ms(v.network_seconds) : "n/a", "path"));
    tr.appendChild(cell(v ? v.bound : "–", "bound"));
    return tr;
  });
  $("shards").tBodies[0].replaceChildren(...rows);
}

// recentEnded is how many ended slot migrations the page lists per shard.
const recentEnded = 5;

// renderMigrations lists the atomic slot migrations of each shard's engine
// (/stats "shard_engines"[].engine.slot_migrations, kept by the engine
// poll): those still running, then the latest ended ones. A migration
// shows on its source (EXPORT, "other node" its target) and on its target
// (IMPORT, "other node" its source), under the same job name.
function renderMigrations(doc) {
  const rows = [];
  const clock = (t) => new Date(t).toLocaleTimeString();
  for (const e of (doc.shard_engines || []).slice().sort((a, b) => a.shard.localeCompare(b.shard))) {
    const ms = (e.engine && e.engine.slot_migrations) || [];
    const running = ms.filter((m) => m.end === null);
    const ended = ms.filter((m) => m.end !== null).slice(-recentEnded).reverse();
    for (const m of running.concat(ended)) {
      const tr = document.createElement("tr");
      tr.dataset.shard = e.shard;
      tr.dataset.name = m.name;
      tr.dataset.operation = m.operation;
      const other = m.operation === "EXPORT" ? "to " + m.target_node : "from " + m.source_node;
      tr.append(cell(e.shard, "name"), cell(m.operation, "name operation"), cell(m.slots, "name slots"),
        cell(other, "name node"), cell(m.state, "name state"), cell(clock(m.start), "start"),
        cell(m.end === null ? "running" : clock(m.end), "end"),
        cell(m.end === null
          ? ((Date.now() - Date.parse(m.seen)) / 1000).toFixed(0) + " so far"
          : ((Date.parse(m.end) - Date.parse(m.start)) / 1000).toFixed(0), "seconds"));
      if (m.end === null) tr.className = "running";
      rows.push(tr);
    }
  }
  $("migrations-section").hidden = rows.length === 0;
  $("migrations").tBodies[0].replaceChildren(...rows);
}

function renderVerdict(doc) {
  const v = doc.verdict;
  const bar = $("verdict-bar");
  if (!v) {
    bar.replaceChildren();
    $("verdict-text").textContent = "no verdict yet (the first interval has not ended)";
    $("verdict-when").textContent = "";
    return;
  }
  // The bar: each part of the latest interval's account over its cycle.
  const parts = v.parts || {};
  const segs = [];
  const legend = [];
  for (const key of partNames) {
    const pct = v.cycle_seconds > 0 ? 100 * (parts[key] || 0) / v.cycle_seconds : 0;
    const d = document.createElement("div");
    d.className = key;
    d.style.width = pct.toFixed(2) + "%";
    d.title = key + " " + pct.toFixed(1) + "%";
    if (pct >= 6) d.textContent = key + " " + pct.toFixed(0) + "%";
    segs.push(d);
    const l = document.createElement("span");
    l.className = key;
    l.dataset.share = key;
    l.textContent = key + " " + pct.toFixed(1) + "%";
    legend.push(l);
  }
  bar.replaceChildren(...segs);
  $("verdict-legend").replaceChildren(...legend);
  $("verdict-text").textContent = v.string;
  const age = v.last_requests_age_seconds;
  $("verdict-when").textContent = v.held
    ? "(latest " + v.interval_seconds.toFixed(2) + " s interval with requests, ended " + age.toFixed(1) + " s ago, " + v.requests + " requests: " + v.bound + "; idle since, kept until the window has passed)"
    : "(latest " + v.interval_seconds.toFixed(2) + " s interval, " + v.requests + " requests: " + v.bound +
      (v.requests === 0 && age !== null ? "; last requests " + age.toFixed(1) + " s ago" : "") + ")";

  $("split-probe").textContent = doc.probe && doc.probe.count > 0 ? ms(doc.probe.p50) : "n/a";
  $("split-util").textContent = v.wait_known ? (100 * v.engine_utilization).toFixed(0) + " %" : "n/a";
  $("split-little").textContent = v.little ? v.l.toFixed(2) + " vs " + v.lambda_w.toFixed(2) : "n/a";
}

// accountRow fills the account table's row of that name: each part of the
// account a (/stats "verdict" or "account"; null: dashes) in ms, 4 decimals
// as the exit's table prints them.
function accountRow(row, a) {
  const tr = document.querySelector('#account tr[data-row="' + row + '"]');
  const cells = [tr.cells[0]];
  for (const key of partNames) {
    const td = cell(a && a.parts ? (1000 * a.parts[key]).toFixed(4) : "–");
    td.dataset.part = key;
    cells.push(td);
  }
  const cyc = cell(a && a.parts ? (1000 * a.cycle_seconds).toFixed(4) : "–");
  cyc.dataset.part = "cycle";
  const req = cell(a ? String(a.requests) : "–");
  req.dataset.part = "requests";
  cells.push(cyc, req);
  tr.replaceChildren(...cells);
}

function render(doc) {
  const w = doc.window;
  $("window-text").textContent = w
    ? "(last " + w.seconds.toFixed(1) + " s: " + w.intervals + " intervals of " + w.interval_seconds + " s)"
    : "(since start)";
  renderCommands(doc);
  renderShards(doc);
  renderMigrations(doc);
  renderVerdict(doc);
  accountRow("latest", doc.verdict && doc.verdict.requests > 0 ? doc.verdict : null);
  accountRow("since-start", doc.account);
}

// Key and slot heat (/keys, /slots): shown only when the proxy has heat
// on (the endpoints answer 404 otherwise). Key names are set as text.
async function renderHeat() {
  const [kr, sr] = await Promise.all([
    fetch("keys?n=10", { cache: "no-store" }), fetch("slots", { cache: "no-store" })]);
  if (!kr.ok || !sr.ok) return;
  const keys = await kr.json(), slots = await sr.json();
  $("heat-section").hidden = false;
  $("heat-text").textContent = "(since start, sampled 1 in " + keys.sample + ", names " + keys.key_names + ")";
  const rows = [];
  const n = Math.max(keys.by_requests.length, keys.by_bytes.length, keys.by_engine_time.length);
  const cell = (text, name) => {
    const td = document.createElement("td");
    if (name) td.className = "name";
    td.textContent = text;
    return td;
  };
  for (let i = 0; i < n; i++) {
    const r = keys.by_requests[i], b = keys.by_bytes[i], e = keys.by_engine_time[i];
    const tr = document.createElement("tr");
    tr.append(cell(r ? r.key : "", true), cell(r ? r.rate.toFixed(1) : ""), cell(r ? r.rate_error.toFixed(1) : ""),
      cell(b ? b.key : "", true), cell(b ? (b.estimate / 1e6).toFixed(2) : ""),
      cell(e ? e.key : "", true), cell(e ? e.estimate.toFixed(3) : ""));
    rows.push(tr);
  }
  $("heat-keys").tBodies[0].replaceChildren(...rows);
  // One strip per shard: 512 cells of 32 slots, shaded by requests
  // relative to the hottest cell of any shard.
  const cells = 512, per = 16384 / cells;
  const byShard = new Map();
  for (const s of slots.slots) {
    const name = s.shard || "(one engine)";
    if (!byShard.has(name)) byShard.set(name, new Float64Array(cells));
    byShard.get(name)[Math.floor(s.slot / per)] += s.requests;
  }
  let hottest = 0;
  for (const a of byShard.values()) for (const v of a) hottest = Math.max(hottest, v);
  const strips = [];
  for (const [name, a] of [...byShard.entries()].sort()) {
    const row = document.createElement("div");
    row.className = "strip";
    const label = document.createElement("span");
    label.className = "mono";
    label.textContent = name;
    const cv = document.createElement("canvas");
    cv.width = cells;
    cv.height = 14;
    const g = cv.getContext("2d");
    for (let i = 0; i < cells; i++) {
      if (a[i] === 0) continue;
      const x = hottest > 0 ? a[i] / hottest : 0;
      g.fillStyle = "rgba(225, 87, 89, " + (0.15 + 0.85 * x).toFixed(3) + ")";
      g.fillRect(i, 0, 1, 14);
    }
    row.append(label, cv);
    strips.push(row);
  }
  $("slot-strips").replaceChildren(...strips);
  const im = slots.imbalance;
  $("slots-text").textContent = "(requests per hash slot since start, 32 slots a cell, per shard; imbalance max/mean: requests " +
    im.requests.toFixed(2) + ", bytes " + im.bytes.toFixed(2) + ", engine " + im.engine.toFixed(2) + ")";
}

let updates = 0;

async function tick() {
  const st = $("status");
  try {
    const r = await fetch("stats?window=" + encodeURIComponent($("window").value), { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    await renderHeat();
    updates++;
    st.className = "status";
    st.textContent = "updated " + new Date().toLocaleTimeString() + " (" + updates + " updates)";
    st.dataset.updates = String(updates);
  } catch (e) {
    st.className = "status err";
    st.textContent = "cannot read /stats: " + e.message;
  }
}

// The window may be chosen in the address: /?window=30s.
const asked = new URLSearchParams(location.search).get("window");
if (asked && [...$("window").options].some((o) => o.value === asked)) $("window").value = asked;
$("window").addEventListener("change", tick);
tick();
setInterval(tick, 1000);
