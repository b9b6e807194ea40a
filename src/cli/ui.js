// floe ui: polls the tool's JSON (/api/inspect = `floe inspect --json`, /api/show/ID,
// /api/verify) and draws the history, the charts and one checkpoint's timeline as SVG.
"use strict";
const POLL_MS = 2000;
const COLORS = { full: "#3182ce", incremental: "#dd6b20", savepoint: "#805ad5" };
const PHASES = [["alignment", "#d69e2e"], ["sync", "#e53e3e"], ["async", "#38a169"]];
let selected = null, inspectData = null, verifyData = null, verifyKey = "";
const shows = new Map(); // checkpoints never change once written: one fetch each

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0, v = n;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return i ? v.toFixed(1) + " " + u[i] : n + " B";
}
function ms(us) { return us == null ? "–" : (us / 1000).toFixed(1) + " ms"; }
async function getJson(url) {
  const r = await fetch(url, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.status);
  return body;
}
function color(c) { return c.stats && c.status === "ok" ? (COLORS[c.kind] || "#a0aec0") : "#a0aec0"; }

// A bar chart over checkpoints: values(c) -> [bar, line?].
function chart(svg, rows, values, fmt) {
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), L = 64, B = 22, T = 8;
  const vals = rows.map(values);
  const max = Math.max(1, ...vals.flat().filter(v => v != null));
  const bw = (W - L - 8) / Math.max(rows.length, 1);
  let s = "";
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * (1 - i / 4);
    s += `<line x1="${L}" x2="${W - 4}" y1="${y}" y2="${y}" stroke="#edf2f7"/>`;
    s += `<text x="${L - 4}" y="${y + 4}" text-anchor="end" font-size="10" fill="#555">${esc(fmt(max * i / 4))}</text>`;
  }
  let line = "";
  rows.forEach((c, i) => {
    const [bar, ln] = vals[i], x = L + i * bw;
    if (bar != null) {
      const h = (H - T - B) * bar / max;
      s += `<rect x="${x + bw * 0.15}" y="${H - B - h}" width="${Math.max(bw * 0.7, 1)}" height="${h}" fill="${color(c)}"><title>${esc(c.id + " " + (c.kind || "") + ": " + fmt(bar))}</title></rect>`;
    }
    if (ln != null) line += `${line ? "L" : "M"}${x + bw / 2},${H - B - (H - T - B) * ln / max}`;
    if (rows.length <= 30 || i % Math.ceil(rows.length / 30) === 0)
      s += `<text x="${x + bw / 2}" y="${H - 8}" text-anchor="middle" font-size="10" fill="#555">${c.id}</text>`;
  });
  if (line) s += `<path d="${line}" fill="none" stroke="#2d3748" stroke-width="1.5"/>`;
  if (!rows.length) s += `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#888">no checkpoints</text>`;
  svg.innerHTML = s;
}

function renderHistory() {
  const d = inspectData, rows = d.checkpoints;
  document.getElementById("dir").textContent = "— " + d.dir;
  chart(document.getElementById("c-dur"), rows, c => [c.stats_totals ? c.stats_totals.duration_us / 1000 : null], v => v.toFixed(1));
  chart(document.getElementById("c-size"), rows,
    c => [c.stats_totals ? c.stats_totals.bytes_written : c.bytes_own, c.stats_totals ? c.stats_totals.full_state_bytes : null], bytes);
  const verdict = new Map((verifyData ? verifyData.checkpoints : []).map(v => [v.id + (v.savepoint ? "s" : ""), v]));
  const tb = document.querySelector("#history tbody");
  tb.innerHTML = rows.slice().reverse().map(c => {
    const t = c.stats_totals, r = c.recovery, v = verdict.get(c.id + (c.kind === "savepoint" ? "s" : ""));
    const vtext = v ? (v.status === "ok" ? `<span class="ok">ok (${v.files} files)</span>` : `<span class="bad">${esc(v.status)}: ${v.problems} problem(s)</span>`) : "…";
    return `<tr data-id="${c.id}" class="${c.id === selected ? "sel" : ""}">
      <td>${c.id}</td><td class="l k-${esc(c.kind)}">${esc(c.kind || "?")}</td>
      <td class="l ${c.status === "ok" ? "ok" : "bad"}">${esc(c.status)}${c.reason ? ": " + esc(c.reason) : ""}</td>
      <td class="l">${esc(c.created || "–")}</td><td>${t ? ms(t.duration_us) : "no statistics"}</td>
      <td>${t ? ms(t.alignment_max_us) : "–"}</td><td>${t ? bytes(t.bytes_written) : "–"}</td>
      <td>${t ? bytes(t.full_state_bytes) : "–"}</td><td>${t ? bytes(t.inflight_bytes) : "–"}</td>
      <td>${c.chain_length}</td><td>${r ? bytes(r.bytes) + " / " + r.files + " files" : "–"}</td>
      <td title="${r ? esc(r.basis) : ""}">${r && r.estimated_ms != null ? "~" + r.estimated_ms.toFixed(1) + " ms" : "no estimate"}</td>
      <td class="l">${vtext}</td></tr>`;
  }).join("");
  tb.querySelectorAll("tr").forEach(tr => tr.onclick = () => select(+tr.dataset.id));
  const f = d.footprint, rr = d.restore_rate;
  const tree = d.tree.map(n => "&nbsp;".repeat(n.depth * 3) + (n.depth ? "└─ " : "") + n.id + ` <span class="k-${esc(n.kind)}">${esc(n.kind)}</span>`).join("<br>");
  document.getElementById("facts").innerHTML = `<h2>Directory</h2>
    <div>retained ${bytes(f.retained_bytes)} against live state ${bytes(f.live_bytes)} (checkpoint ${f.live_checkpoint ?? "–"})${f.retained_over_live != null ? ", " + f.retained_over_live.toFixed(2) + "×" : ""}; orphaned ${bytes(f.orphaned_bytes)} in ${d.orphans.length} file(s)${d.foreign.length ? "; foreign files: " + d.foreign.length : ""}</div>
    <div>recovery estimates: ${rr ? "restore rate " + bytes(Math.round(rr.bytes * 1e6 / rr.elapsed_us)) + "/s, measured when checkpoint " + rr.recorded_in + " restored " + rr.restored : "none (no restore measured in this directory)"}</div>
    <div>verify: ${verifyData ? (verifyData.ok ? `<span class="ok">ok</span>` : `<span class="bad">damaged</span>`) + `, ${verifyData.files_checked} files, ${verifyData.blocks_checked} blocks, ${verifyData.records_checked} records checked` + verifyData.problems.map(p => `<div class="bad">${esc(p.file)}${p.offset != null ? " @" + p.offset : ""}: ${esc(p.what)}</div>`).join("") : "running…"}</div>
    <div>chains:<br><code>${tree || "–"}</code></div>`;
}

function timeline(s) {
  const tasks = s.tasks, t0 = s.triggered_unix_us, end = Math.max(s.completed_unix_us - t0, 1);
  const W = 900, L = 150, R = 20, row = 18, T = 20, H = T + row * tasks.length + 24;
  const x = us => L + (W - L - R) * Math.min(Math.max(us, 0), end) / end;
  let g = `<line x1="${x(0)}" x2="${x(0)}" y1="${T - 6}" y2="${H - 20}" stroke="#718096"/>
    <line x1="${x(end)}" x2="${x(end)}" y1="${T - 6}" y2="${H - 20}" stroke="#718096" stroke-dasharray="3,2"/>
    <text x="${x(0)}" y="${T - 8}" font-size="10">trigger</text><text x="${x(end)}" y="${T - 8}" font-size="10" text-anchor="end">completed +${ms(end)}</text>`;
  tasks.forEach((k, i) => {
    const y = T + i * row, b = k.barrier_unix_us - t0;
    g += `<text x="${L - 6}" y="${y + 12}" text-anchor="end" font-size="11">${esc(k.operator)}[${k.subtask}]</text>`;
    g += `<line x1="${x(0)}" x2="${x(b)}" y1="${y + 8}" y2="${y + 8}" stroke="#cbd5e0" stroke-dasharray="2,2"/>`;
    let at = b;
    for (const [name, col] of PHASES) {
      const d = k[name + "_us"];
      if (d > 0) g += `<rect x="${x(at)}" y="${y + 2}" width="${Math.max(x(at + d) - x(at), 1)}" height="${row - 5}" fill="${col}"><title>${name} ${ms(d)}</title></rect>`;
      at += d;
    }
    const a = k.ack_unix_us - t0;
    g += `<rect x="${x(a) - 1}" y="${y}" width="3" height="${row - 1}" fill="#1a202c"><title>ack +${ms(a)}</title></rect>`;
  });
  for (let i = 0; i <= 4; i++) g += `<text x="${x(end * i / 4)}" y="${H - 6}" font-size="10" text-anchor="middle" fill="#555">${ms(end * i / 4)}</text>`;
  const legend = [["barrier wait", "#cbd5e0"], ...PHASES, ["ack", "#1a202c"]].map(([n, c]) => `<span><i class="sw" style="background:${c}"></i>${n}</span>`).join("");
  return `<div class="legend">${legend}</div><svg width="${W}" height="${H}">${g}</svg>`;
}

function renderDetail(id) {
  const s = shows.get(id), el = document.getElementById("detail");
  document.getElementById("detail-title").textContent = "Checkpoint " + id;
  if (!s) { el.textContent = "loading…"; return; }
  if (s.error) { el.innerHTML = `<div class="err">${esc(s.error)}</div>`; return; }
  let h = `<div>${esc(s.kind)}, parent ${s.parent ?? "–"}, base ${s.base}, created ${esc(s.created)}; recovery reads ${bytes(s.recovery.bytes)} in ${s.recovery.files} files, ${s.recovery.estimated_ms != null ? "~" + s.recovery.estimated_ms.toFixed(1) + " ms" : "no estimate"} <small>(${esc(s.recovery.basis)})</small></div>`;
  if (s.stats) {
    h += `<h2>Timeline (one row per task: barrier, alignment, sync, async, ack)</h2>` + timeline(s.stats);
    h += `<table><thead><tr><th class="l">task</th><th>barrier</th><th>alignment</th><th>sync</th><th>async</th><th>ack</th><th>written</th><th>full state</th><th>in-flight</th><th>buffered</th></tr></thead><tbody>` +
      s.stats.tasks.map(k => `<tr><td class="l">${esc(k.operator)}[${k.subtask}]</td><td>+${ms(k.barrier_unix_us - s.stats.triggered_unix_us)}</td><td>${ms(k.alignment_us)}</td><td>${ms(k.sync_us)}</td><td>${ms(k.async_us)}</td><td>+${ms(k.ack_unix_us - s.stats.triggered_unix_us)}</td><td>${bytes(k.bytes_written)}</td><td>${bytes(k.full_state_bytes)}</td><td>${bytes(k.inflight_bytes)}</td><td>${k.buffered_records}</td></tr>`).join("") + `</tbody></table>`;
  } else h += `<div>no statistics (written by the library directly, or before floe recorded them)</div>`;
  h += `<h2>Files it needs, by the checkpoint that wrote them</h2>` + s.needs.map((n, i) => `<div>${"&nbsp;".repeat(i * 3)}${i ? "└─ " : ""}<b>${n.checkpoint}</b>: ${n.files.length} file(s), ${bytes(n.bytes)}<br>` +
    n.files.map(f => `${"&nbsp;".repeat(i * 3 + 6)}<code>${esc(f.path)}</code> ${bytes(f.size)}`).join("<br>") + `</div>`).join("");
  el.innerHTML = h;
}

async function select(id) {
  selected = id;
  if (inspectData) renderHistory();
  renderDetail(id);
  if (!shows.has(id)) {
    try { shows.set(id, await getJson("/api/show/" + id)); } catch (e) { shows.set(id, { error: String(e) }); }
  }
  if (selected === id) renderDetail(id);
}

async function refresh() {
  try {
    inspectData = await getJson("/api/inspect");
    const ids = inspectData.checkpoints.map(c => c.id);
    document.getElementById("status").textContent = `${ids.length} checkpoint(s); updated ${new Date().toLocaleTimeString()}, every ${POLL_MS / 1000} s`;
    if (selected == null || !ids.includes(selected)) selected = ids.length ? ids[ids.length - 1] : null;
    renderHistory();
    if (selected != null && !shows.has(selected)) select(selected);
    const key = ids.join(",");
    if (key !== verifyKey) {
      verifyKey = key;
      getJson("/api/verify").then(v => { verifyData = v; renderHistory(); }).catch(() => {});
    }
  } catch (e) {
    document.getElementById("status").innerHTML = `<span class="err">${esc(e)}</span>`;
  }
}
refresh();
setInterval(refresh, POLL_MS);
