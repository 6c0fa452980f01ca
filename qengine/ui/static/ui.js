// The qengine web UI's pages. They draw only what the JSON API serves (/api/queries,
// /api/queries/{id}, /api/workers), polling it while anything runs. Text from the API goes
// into the page as text nodes, never as HTML. The DAG is laid out by dagre and drawn as SVG;
// the timeline and the reducer-size charts are Chart.js charts.
"use strict";

const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const SVG = "http://www.w3.org/2000/svg";

function stageColour(stage, alpha) {
  const hex = PALETTE[stage % PALETTE.length];
  if (alpha === undefined) return hex;
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function unknown() { return el("span", {class: "unknown"}, "unknown"); }

function bytes(n) {
  if (n === null || n === undefined) return unknown();
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0, x = n;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return `${i ? x.toFixed(1) : x} ${units[i]}`;
}

function bytesText(n) { const b = bytes(n); return typeof b === "string" ? b : "unknown"; }

function seconds(s) { return s === null || s === undefined ? unknown() : `${s.toFixed(3)} s`; }

function figure(x) { return x === null || x === undefined ? unknown() : String(x); }

function txt(x) { return x === null || x === undefined ? "unknown" : String(x); }

async function api(path) {
  const response = await fetch(path, {credentials: "same-origin", headers: {Accept: "application/json"}});
  if (response.status === 401) { window.location.assign("/"); throw new Error("not logged in"); }
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function showStatus(text) { document.getElementById("status").textContent = text; }

// Call draw() with fresh data every `every` ms while keepGoing(data) says so.
function poll(path, draw, every, keepGoing) {
  const round = async () => {
    try {
      const data = await api(path);
      draw(data);
      showStatus(`updated ${new Date().toLocaleTimeString()}`);
      if (!keepGoing || keepGoing(data)) setTimeout(round, every);
    } catch (e) {
      showStatus(`update failed: ${e.message}`);
      setTimeout(round, every * 3);
    }
  };
  round();
}

function fillTable(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows.map(cells => el("tr", {}, ...cells.map(([cls, content]) => el("td", cls ? {class: cls} : {}, content)))));
}

// ---- the queries page ------------------------------------------------------------------

function queriesPage() {
  const table = document.getElementById("queries");
  poll("/api/queries", list => fillTable(table, list.map(q => [
    [null, el("a", {href: `/queries/${encodeURIComponent(q.id)}`}, q.id)],
    [null, q.user],
    [`status-${q.status}`, q.status + (q.queue ? ` (${q.queue.waits_for}, #${q.queue.position})` : "")],
    ["sql", q.sql === null ? unknown() : q.sql],
    ["num", q.status === "queued" ? unknown() : seconds(q.seconds)],
    ["num", figure(q.rows)],
    ["num", figure(q.tasks)],
    ["num", bytes(q.shuffle_bytes)],
    ["error", q.error || ""],
  ])), 1000);
}

// ---- the query page --------------------------------------------------------------------

function facts(pairs) {
  return el("dl", {class: "facts"}, ...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function drawSummary(q) {
  document.title = `qengine: ${q.id}`;
  document.getElementById("summary").replaceChildren(
    el("h2", {}, `Statement ${q.id}`),
    el("pre", {class: "sql"}, q.sql === null ? "(not started: SQL unknown)" : q.sql),
    facts([
      ["User", q.user], ["Status", el("span", {class: `status-${q.status}`}, q.status)], ["Duration", seconds(q.seconds)],
      ["Rows", figure(q.rows)], ["Tasks", figure(q.tasks)], ["Bytes shuffled", bytes(q.shuffle_bytes)],
      ["Spilled", bytes(q.spilled_bytes)], ["Recovery", figure(q.recovery)], ["Error", q.error || "none"],
    ]),
  );
}

function edgeLabel(e) {
  const kind = e.kind || "exchange";
  const parts = e.partitions && kind !== "broadcast" ? ` ×${e.partitions}` : "";
  return `${kind}${parts} · ${bytesText(e.bytes)}`;
}

function drawDag(q) {
  const box = document.getElementById("dag");
  const g = new dagre.graphlib.Graph();
  g.setGraph({rankdir: "BT", nodesep: 30, ranksep: 50, marginx: 10, marginy: 10});
  g.setDefaultEdgeLabel(() => ({}));
  const lineHeight = 14;
  for (const s of q.stages) {
    const head = `Stage ${s.stage} · ${s.role || "?"} · ${txt(s.tasks_done)}/${txt(s.tasks)} tasks` +
      (s.tasks_running ? ` (${s.tasks_running} running)` : "");
    const lines = [head, `→ ${s.target}`, `rows ${txt(s.rows)}, ${bytesText(s.bytes)}`,
      ...s.operators.slice(0, 12).map(o => o.length > 70 ? o.slice(0, 69) + "…" : o)];
    if (s.operators.length > 12) lines.push(`… ${s.operators.length - 12} more`);
    const width = 16 + 6.7 * Math.max(...lines.map(l => l.length));
    g.setNode(String(s.stage), {width, height: 10 + lineHeight * lines.length, lines, stage: s.stage});
  }
  for (const e of q.edges) {
    const label = edgeLabel(e);
    g.setEdge(String(e.from), String(e.to), {label, width: 6.5 * label.length, height: 14, labelpos: "c"});
  }
  dagre.layout(g);
  const graph = g.graph();
  const svg = el("svg:svg", {width: Math.max(200, graph.width || 0), height: Math.max(60, graph.height || 0), role: "img",
                             "aria-label": "stage DAG"});
  for (const id of g.edges()) {
    const e = g.edge(id);
    const d = e.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    svg.append(el("svg:g", {class: "edge"}, el("svg:path", {d, "marker-end": "url(#arrow)"}),
      el("svg:text", {x: e.x, y: e.y + 4, "text-anchor": "middle"}, e.label)));
  }
  for (const id of g.nodes()) {
    const n = g.node(id);
    const group = el("svg:g", {class: "stage", "data-stage": n.stage, transform: `translate(${n.x - n.width / 2},${n.y - n.height / 2})`});
    group.append(el("svg:rect", {width: n.width, height: n.height, rx: 4, stroke: stageColour(n.stage)}));
    n.lines.forEach((line, i) => group.append(el("svg:text", {x: 8, y: 16 + i * lineHeight, "font-weight": i ? "normal" : "bold"}, line)));
    svg.append(group);
  }
  svg.prepend(el("svg:defs", {}, el("svg:marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
                                                    orient: "auto-start-reverse"}, el("svg:path", {d: "M0,0 L10,5 L0,10 z", fill: "#555"}))));
  box.replaceChildren(svg);
}

// Bars of the timeline: per task attempt its fetch wait, then its map or reduce work; per
// worker, on a row of their own, its pushes of map output to reducers' hosts (prefetch), which
// overlap the map work where pull's reducers wait to fetch. Each bar is {x: [from, to], y: row, span}.
function timelineData(q) {
  const roles = Object.fromEntries(q.stages.map(s => [s.stage, s.role || "map"]));
  const rowOf = s => `${s.worker} slot ${s.slot}`;
  const rows = [...new Set(q.spans.map(rowOf))].sort((a, b) => a.localeCompare(b, undefined, {numeric: true}));
  const sets = {fetch: [], map: [], reduce: [], push: []};
  for (const s of q.spans) {
    const wait = Math.min(s.read_seconds, s.end - s.start);
    if (wait > 0) sets.fetch.push({x: [s.start, s.start + wait], y: rowOf(s), span: s});
    sets[roles[s.stage] === "reduce" ? "reduce" : "map"].push({x: [s.start + wait, s.end], y: rowOf(s), span: s});
  }
  const pushRows = new Set();
  for (const p of q.pushes) {
    const row = `${p.worker} pushes`;
    pushRows.add(row);
    sets.push.push({x: [p.start, p.end], y: row, span: p});
  }
  return {rows: rows.concat([...pushRows].sort()), sets};
}

const outcomeBorder = ctx => {
  const span = ctx.raw && ctx.raw.span;
  if (!span) return "#000";
  if (span.outcome === "failed" || span.outcome === "lost") return "#d00";
  return span.outcome === "running" ? "#06c" : "#000";
};

function timelineDatasets(sets) {
  const colour = alpha => ctx => ctx.raw ? stageColour(ctx.raw.span.stage, ctx.raw.span.outcome === "running" ? 0.5 * alpha : alpha) : "#999";
  const common = {grouped: false, barPercentage: 0.8, categoryPercentage: 1.0, borderSkipped: false};
  return [
    {...common, label: "fetch wait", data: sets.fetch, backgroundColor: "rgba(150,150,150,0.6)", borderColor: outcomeBorder, borderWidth: 0},
    {...common, label: "map", data: sets.map, backgroundColor: colour(0.85), borderColor: outcomeBorder,
     borderWidth: ctx => (ctx.raw && ctx.raw.span.outcome !== "done" ? 2 : 0)},
    {...common, label: "reduce", data: sets.reduce, backgroundColor: colour(0.45), borderColor: outcomeBorder, borderWidth: 2},
    {...common, label: "push", data: sets.push, backgroundColor: colour(0.25), borderColor: "#e67e00", borderWidth: 1},
  ];
}

let timeline = null;

function drawTimeline(q) {
  const box = document.getElementById("timeline");
  const {rows, sets} = timelineData(q);
  box.style.height = `${80 + 22 * Math.max(1, rows.length)}px`;
  const datasets = timelineDatasets(sets);
  if (timeline === null) {
    timeline = new Chart(box.querySelector("canvas"), {
      type: "bar",
      data: {labels: rows, datasets},
      options: {
        indexAxis: "y", animation: false, maintainAspectRatio: false,
        scales: {x: {type: "linear", min: 0, title: {display: true, text: "seconds from the query's start"}}, y: {type: "category", stacked: false}},
        plugins: {
          // the bars' colours follow their stage: the legend shows stage 0's
          legend: {position: "top", labels: {generateLabels: chart => Chart.defaults.plugins.legend.labels.generateLabels(chart).map(
            item => ({...item, fillStyle: {map: stageColour(0, 0.85), reduce: stageColour(0, 0.45), push: stageColour(0, 0.25)}[item.text] ||
                                          item.fillStyle}))}},
          tooltip: {callbacks: {label: ctx => {
            const s = ctx.raw.span, [a, b] = ctx.raw.x;
            const what = `stage ${s.stage} task ${s.task}` + (s.attempt ? ` attempt ${s.attempt}` : "") +
              ` ${ctx.dataset.label} (${s.outcome}${s.speculative ? ", speculative" : ""})`;
            return `${what}: ${a.toFixed(3)}–${b.toFixed(3)} s`;
          }}},
        },
      },
    });
  } else {
    timeline.data.labels = rows;
    timeline.data.datasets.forEach((d, i) => { d.data = datasets[i].data; });
    timeline.update("none");
  }
  box.dataset.bars = String(datasets.reduce((n, d) => n + d.data.length, 0));
}

const shuffleCharts = new Map();

function drawShuffles(q) {
  const box = document.getElementById("shuffles");
  if (!q.shuffles.length) { box.replaceChildren(el("p", {class: "note"}, "No shuffle (yet).")); shuffleCharts.clear(); return; }
  const seen = new Set();
  for (const sh of q.shuffles) {
    seen.add(sh.stage);
    let entry = shuffleCharts.get(sh.stage);
    if (!entry) {
      const canvas = el("canvas", {});
      const factsBox = el("div", {});
      const section = el("div", {class: "shuffle", "data-stage": sh.stage}, el("div", {class: "chart"}, canvas), factsBox);
      box.append(section);
      const chart = new Chart(canvas, {
        type: "bar", data: {labels: [], datasets: [
          {label: "predicted bytes", data: [], backgroundColor: "rgba(150,150,150,0.6)"},
          {label: "actual bytes", data: [], backgroundColor: stageColour(sh.stage)},
        ]},
        options: {animation: false, maintainAspectRatio: false, plugins: {title: {display: true, text: `Stage ${sh.stage}: reducer sizes`}},
                  scales: {x: {title: {display: true, text: "partition"}}, y: {title: {display: true, text: "bytes"}}}},
      });
      entry = {section, chart, factsBox};
      shuffleCharts.set(sh.stage, entry);
    }
    const n = Math.max(sh.actual_bytes.length, sh.predicted_bytes ? sh.predicted_bytes.length : 0);
    entry.chart.data.labels = Array.from({length: n}, (_, i) => String(i));
    entry.chart.data.datasets[0].data = sh.predicted_bytes || [];
    entry.chart.data.datasets[1].data = sh.actual_bytes;
    entry.chart.update("none");
    const pct = x => (x === null ? unknown() : `${(100 * x).toFixed(1)}%`);
    const hosts = sh.hosts.length
      ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "host"), el("th", {}, "reducer bytes"), el("th", {}, "round-robin would"))),
        el("tbody", {}, ...sh.hosts.map(h => el("tr", {}, el("td", {}, h.address), el("td", {class: "num"}, bytes(h.bytes)),
                                                   el("td", {class: "num"}, bytes(h.round_robin_bytes))))))
      : unknown();
    entry.factsBox.replaceChildren(facts([
      ["Exchange", `${sh.kind}, ${sh.partitions} partitions, ${sh.map_tasks} map tasks, ${sh.mode}`],
      ["Placement", sh.placement], ["Prediction error", el("span", {}, "max ", pct(sh.prediction_max_error), ", mean ", pct(sh.prediction_mean_error))],
      ["Local bytes", bytes(sh.local_bytes)], ["Remote bytes", bytes(sh.remote_bytes)],
      ["Spilled (whole query)", bytes(q.spilled_bytes)], ["Reducer read wait", seconds(sh.reducer_read_wait_seconds)],
      ["Push tail", seconds(sh.push_tail_seconds)], ["Pushed map tasks", String(sh.pushed_map_tasks)],
      ["Prefetch hits", `${sh.prefetch_hits}/${sh.blocks}`], ["Push decision", sh.push_decision || "n/a"], ["Per host", hosts],
    ]));
  }
  for (const [stage, entry] of shuffleCharts) {
    if (!seen.has(stage)) { entry.chart.destroy(); entry.section.remove(); shuffleCharts.delete(stage); }
  }
}

function queryPage() {
  const id = decodeURIComponent(window.location.pathname.split("/").pop());
  poll(`/api/queries/${encodeURIComponent(id)}`, q => {
    drawSummary(q);
    drawDag(q);
    drawTimeline(q);
    drawShuffles(q);
    document.body.dataset.status = q.status;
  }, 1000, q => q.status === "running" || q.status === "queued");
}

// ---- the workers page ------------------------------------------------------------------

function workersPage() {
  const table = document.getElementById("workers");
  poll("/api/workers", list => fillTable(table, list.map(w => [
    ["num", w.id], [null, w.address], [w.alive ? null : "error", w.alive ? "yes" : "no"], ["num", seconds(w.heartbeat_age)],
    ["num", figure(w.slots_busy)], ["num", bytes(w.memory_bytes)], ["num", bytes(w.shuffle_bytes)],
    ["num", w.memory_budget === null ? "none" : bytes(w.memory_budget)], ["num", bytes(w.spilled_bytes)],
    ["num", figure(w.tasks_run)], ["num", figure(w.tasks_failed)],
  ])), 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  ({queries: queriesPage, query: queryPage, workers: workersPage})[document.body.dataset.page]();
});
