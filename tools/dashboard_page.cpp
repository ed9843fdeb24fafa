// The dashboard's page (see dashboard_server.hpp): HTML, styles and script in one document.
#include "tools/dashboard_server.hpp"

namespace cohort::tools {

const char* dashboard_page() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cohort</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
tr.job { cursor: pointer; } tr.selected { background: #eef4ff; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; }
figure { margin: 0; } figcaption { font-weight: 600; }
canvas { border: 1px solid #ccc; background: #fff; }
pre { background: #f6f6f6; padding: 8px; max-height: 320px; overflow: auto; font-size: 12px; }
#login { display: none; } #status { color: #a00; }
</style></head>
<body data-state="loading">
<h1>cohort</h1>
<form id="login"><label>Token (<code>submit metrics-token</code>): <input id="token" size="70"></label>
<button>Log in</button></form>
<div id="status"></div>
<h2>Nodes</h2>
<table id="nodes"><thead><tr><th>node</th><th>address</th><th>resources</th><th>GPUs</th><th>state</th></tr></thead><tbody></tbody></table>
<h2>Jobs</h2>
<table id="jobs"><thead><tr><th>id</th><th>name</th><th>state</th><th>step</th><th>loss</th><th>attempts</th><th>failures</th><th>preemptions</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2 id="job-title"></h2>
<div class="charts">
<figure><figcaption>loss</figcaption><canvas width="420" height="200" data-metric="loss" data-points="0"></canvas></figure>
<figure><figcaption>learning rate</figcaption><canvas width="420" height="200" data-metric="lr" data-points="0"></canvas></figure>
<figure><figcaption>tokens/s</figcaption><canvas width="420" height="200" data-metric="tokens_per_s" data-points="0"></canvas></figure>
<figure><figcaption>MFU</figcaption><canvas width="420" height="200" data-metric="mfu" data-points="0"></canvas></figure>
<figure><figcaption>host memory (RSS, MiB) per rank</figcaption><canvas width="420" height="200" data-memory="rss_bytes" data-points="0"></canvas></figure>
<figure id="gpu-memory" hidden><figcaption>GPU memory (allocated, MiB) per rank</figcaption><canvas width="420" height="200" data-memory="gpu_allocated_bytes" data-points="0"></canvas></figure>
</div>
<div id="memory-note"></div>
<h2>Log tail</h2>
<pre id="logs"></pre>
<script>
"use strict";
const hash = new URLSearchParams(location.hash.slice(1));
let token = hash.get("token") || sessionStorage.getItem("cohort-token") || "";
let selected = hash.get("job") || "";
const $ = (id) => document.getElementById(id);
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
async function api(path) {
  const r = await fetch(path, {headers: {Authorization: "Bearer " + token}});
  if (r.status === 401) throw new Error("login");
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}
function showNodes(nodes) {
  const body = $("nodes").tBodies[0]; body.textContent = "";
  for (const n of nodes) {
    const row = body.insertRow(); row.id = "node-" + n.name;
    cell(row, n.name); cell(row, n.address);
    cell(row, Object.entries(n.resources).filter(([k]) => !k.startsWith("accelerator_type"))
      .map(([k, v]) => k + " " + (k === "memory" ? (v / 2 ** 30).toFixed(1) + " GiB" : v)).join(", "));
    cell(row, n.accelerator_type || n.gpu_note || "-");
    cell(row, n.drain_state || "schedulable");
  }
}
function showJobs(jobs) {
  const body = $("jobs").tBodies[0]; body.textContent = "";
  for (const j of jobs) {
    const row = body.insertRow(); row.id = "job-" + j.id; row.className = "job" + (j.id === selected ? " selected" : "");
    row.dataset.state = j.state;
    row.onclick = () => { selected = j.id; refresh(); };
    cell(row, j.id); cell(row, j.name); cell(row, j.state); cell(row, j.step + "/" + j.total_steps);
    cell(row, Number(j.loss).toPrecision(5)); cell(row, j.attempts); cell(row, j.failures.length);
    cell(row, j.preemptions); cell(row, j.reason);
  }
}
const colors = ["#1f5fbf", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d"];
// Draws each series ({label, points: [{x, y}]}) in a colour of its own on one pair of axes;
// data-points counts the points drawn.
function plot(canvas, series, xName) {
  const ctx = canvas.getContext("2d"), all = series.flatMap((s) => s.points);
  canvas.dataset.points = String(all.length);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (all.length === 0) return;
  const pad = 36, w = canvas.width - 2 * pad, h = canvas.height - 2 * pad;
  const xs = all.map((p) => p.x), ys = all.map((p) => p.y);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => pad + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * w;
  const sy = (y) => pad + h - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * h;
  ctx.strokeStyle = "#999"; ctx.lineWidth = 1; ctx.strokeRect(pad, pad, w, h);
  ctx.fillStyle = "#444"; ctx.font = "11px sans-serif";
  ctx.fillText(y1.toPrecision(4), 2, pad + 4); ctx.fillText(y0.toPrecision(4), 2, pad + h);
  const fmt = (x) => xName === "step" ? String(Math.round(x)) : x.toFixed(x1 - x0 < 10 ? 1 : 0);
  ctx.fillText(xName + " " + fmt(x0), pad, canvas.height - 8);
  ctx.fillText(xName + " " + fmt(x1), pad + w - 50, canvas.height - 8);
  series.forEach((s, k) => {
    const colour = colors[k % colors.length];
    if (series.length > 1) { ctx.fillStyle = colour; ctx.fillText(s.label, pad + 4 + 60 * k, pad - 6); }
    ctx.strokeStyle = colour; ctx.lineWidth = 2; ctx.beginPath();
    s.points.forEach((p, i) => { if (i) ctx.lineTo(sx(p.x), sy(p.y)); else ctx.moveTo(sx(p.x), sy(p.y)); });
    ctx.stroke();
    ctx.fillStyle = colour;
    for (const p of s.points) { ctx.beginPath(); ctx.arc(sx(p.x), sy(p.y), 2.5, 0, 7); ctx.fill(); }
  });
}
// A chart of one metric per logged step (history points).
function draw(canvas, points) {
  const key = canvas.dataset.metric;
  plot(canvas, [{label: key, points: points.map((p) => ({x: p.step, y: p[key]}))}], "step");
}
// A chart of one memory figure per rank over the run's time (seconds since its first sample), MiB.
function drawMemory(canvas, ranks) {
  const key = canvas.dataset.memory;
  const t0 = Math.min(...ranks.flatMap((r) => r.points.map((p) => p.t)));
  plot(canvas, ranks.map((r) => ({label: "rank " + r.rank,
    points: r.points.filter((p) => p[key] !== null).map((p) => ({x: p.t - t0, y: p[key] / 2 ** 20}))})), "s");
}
async function refresh() {
  try {
    const cluster = await api("/api/cluster");
    if (!selected && cluster.jobs.length) selected = cluster.jobs[cluster.jobs.length - 1].id;
    showNodes(cluster.nodes); showJobs(cluster.jobs);
    if (selected) {
      $("job-title").textContent = "Job " + selected;
      const history = await api("/api/jobs/" + selected + "/history");
      for (const c of document.querySelectorAll("canvas[data-metric]")) draw(c, history.points);
      const memory = await api("/api/jobs/" + selected + "/memory");
      for (const c of document.querySelectorAll("canvas[data-memory]")) drawMemory(c, memory.ranks);
      $("gpu-memory").hidden = document.querySelector("canvas[data-memory=gpu_allocated_bytes]").dataset.points === "0";
      $("memory-note").textContent = memory.error ? "memory: " + memory.error
        : memory.ranks.length ? "" : "No memory samples: the job runs without run.memory_status_every_s.";
      $("logs").textContent = (await api("/api/jobs/" + selected + "/logs")).lines.join("\n");
    }
    $("status").textContent = ""; $("login").style.display = "none";
    document.body.dataset.state = "loaded";
  } catch (e) {
    if (e.message === "login") { $("login").style.display = "block"; document.body.dataset.state = "login"; }
    else $("status").textContent = String(e.message || e);
  }
}
$("login").onsubmit = (ev) => {
  ev.preventDefault(); token = $("token").value.trim(); sessionStorage.setItem("cohort-token", token); refresh();
};
if (token) sessionStorage.setItem("cohort-token", token);
refresh();
setInterval(refresh, 2000);
</script></body></html>
)HTML";
}

}  // namespace cohort::tools
