// rolloutledger run explorer. Plain JavaScript, no dependencies, nothing
// fetched from anywhere but the page's own origin (or, in a static bundle,
// its own data/ scripts). Views are routed by the URL's hash, so every view
// has a deep link; a view of a live run re-reads its data every few seconds.
"use strict";

const RL = (window.RL = window.RL || {});
RL.timings = {};
const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;

// ---- data: the API, or a static bundle's scripts ----
// A bundle's data/index.js, loaded before this script, sets RL_BUNDLE_INDEX.
const bundle = window.RL_BUNDLE_INDEX || null; // {run, files}
const store = {};
const waiting = {};
window.RL_PUT = (path, v) => { store[path] = v; (waiting[path] || []).forEach((f) => f(v)); delete waiting[path]; };

class HTTPError extends Error {
  constructor(status, body) { super((body && body.error && body.error.message) || "HTTP " + status); this.status = status; }
}

// get reads a view, named by its path's segments: the bundle's index and
// the store key it by the path as the server names it; the request encodes
// every segment, so an id holding "/" or "?" stays one segment, and refuses
// a "." or ".." segment, which the browser would resolve into another route.
function get(segs, params) {
  const path = "/" + segs.join("/");
  if (bundle) {
    if (store[path]) return Promise.resolve(store[path]);
    const file = bundle.files[path];
    if (!file) return Promise.reject(new HTTPError(404, { error: { message: "not in this bundle: " + path } }));
    return new Promise((resolve, reject) => {
      (waiting[path] = waiting[path] || []).push(resolve);
      const s = document.createElement("script");
      s.src = file;
      s.onerror = () => reject(new HTTPError(404, { error: { message: "missing bundle file " + file } }));
      document.head.appendChild(s);
    });
  }
  let url;
  try { url = apiURL(segs) + (params ? "?" + new URLSearchParams(params) : ""); } catch (e) { return Promise.reject(e); }
  const t0 = performance.now();
  const headers = {};
  const tok = sessionStorage.getItem("rl-token");
  if (tok) headers.Authorization = "Bearer " + tok;
  return fetch(url, { headers, cache: "no-store" })
    .then((r) => r.json().catch(() => null).then((b) => {
      RL.fetchMs = performance.now() - t0;
      if (!r.ok) throw new HTTPError(r.status, b);
      return b;
    }));
}

// apiURL is the path of a view's segments, each encoded.
function apiURL(segs) {
  return "/" + segs.map((x) => {
    const seg = String(x);
    if (seg === "" || seg === "." || seg === "..") throw new HTTPError(400, { error: { message: `the id "${seg}" cannot be asked for: it is not a path segment` } });
    return encodeURIComponent(seg);
  }).join("/");
}
RL.apiURL = apiURL;

// ---- helpers ----
const $ = (s, el = document) => el.querySelector(s);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (x, d = 3) => (x == null ? "–" : Number.isInteger(x) ? String(x) : Number(x).toFixed(d));
const pct = (x) => (x == null ? "–" : (100 * x).toFixed(1) + "%");
const enc = encodeURIComponent;
const runBase = (run, ...rest) => ["v1", "runs", run, "explore", ...rest];
const link = (href, text) => `<a href="${esc(href)}">${esc(text)}</a>`;
const hRun = (r) => "#/runs/" + enc(r);
const hStep = (r, s) => hRun(r) + "/steps/" + s;
const hGroup = (r, g) => hRun(r) + "/groups/" + enc(g);
const hAttempt = (r, a) => hRun(r) + "/attempts/" + enc(a);
const hTask = (r, t) => hRun(r) + "/tasks/" + enc(t);
const hTurn = (r, a, n) => hAttempt(r, a) + "/turns/" + n;
const hSearch = (r, query) => hRun(r) + "/search?q=" + enc(query);
// hl writes text with every occurrence of query (any case) marked.
function hl(text, query) {
  const s = String(text ?? "");
  if (!query) return esc(s);
  const re = new RegExp(query.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "giu");
  let out = "", last = 0;
  for (const m of s.matchAll(re)) {
    out += esc(s.slice(last, m.index)) + "<mark>" + esc(m[0]) + "</mark>";
    last = m.index + m[0].length;
  }
  return out + esc(s.slice(last));
}
// policy says which policy version wrote tokens, and how far behind it
// was, in words.
const policy = (s, judged) => `policy version ${s.policy_version}${judged ? ` (${s.staleness} update${s.staleness === 1 ? "" : "s"} behind${s.trained ? "" : ", masked"})` : ""}`;
// v puts a number where the tests (and people copying) can read it exactly.
const v = (k, x, text) => `<span data-k="${esc(k)}" data-v="${esc(x == null ? "" : String(x))}">${esc(text ?? num(x))}</span>`;
const card = (label, k, x, text) => `<div class="card"><b>${v(k, x, text)}</b><small>${esc(label)}</small></div>`;
function setCrumbs(parts) {
  $("#crumbs").innerHTML = parts.map(([h, t], i) => (i < parts.length - 1 ? link(h, t) : `<span>${esc(t)}</span>`)).join("");
}
// cut says where a text was cut to fit its fact, and by how much.
const cut = (n, k) => (n ? `<span class="cut" data-k="${esc(k)}" data-v="${n}"> … ${n} bytes cut</span>` : "");
const cutText = (text, n, k, query) => (text || n ? `<div class="text">${hl(text, query)}${cut(n, k)}</div>` : "");
// verdict is an attempt's reward.computed in words: "no reward yet" before
// one arrived, never a made-up "0/0 tests".
function verdict(a, short) {
  if (a.passed == null) return `<span class="muted" data-k="verdict-${esc(a.attempt)}" data-v="">no reward yet</span>`;
  const word = a.passed ? (short ? "pass" : "passed") : (short ? "fail" : "failed");
  return `<span class="${a.passed ? "ok" : "bad"}" data-k="verdict-${esc(a.attempt)}" data-v="${a.passed}">${word}</span>${a.tests_total ? ` <span data-k="tests-${esc(a.attempt)}" data-v="${a.tests_passed}/${a.tests_total}">${short ? "" : "("}${a.tests_passed}/${a.tests_total}${short ? "" : " tests)"}</span>` : ""}`;
}
// turnBar draws an attempt's turns in turn order as its batch judged them
// (green trains, amber masked: the masked are the oldest, drawn first).
function turnBar(a, state) {
  const n = Math.min(a.turns, 200);
  const judged = a.turn_trained || [];
  return Array.from({ length: n }, (_, i) => {
    let cls = state === "dropped" ? "dropped" : "";
    if (a.batch) cls = i < judged.length ? (judged[i] ? "trained" : "masked") : i < a.turns - a.trained_turns ? "masked" : "trained";
    return `<i class="${cls}"></i>`;
  }).join("");
}
// lastSeen is when the run's last fact arrived, or, when that is not known
// (a bundle), the clock its producer put on it.
const lastSeen = (r) => (r.last_arrival && !r.last_arrival.startsWith("0001") ? r.last_arrival : r.last_activity);
function ts(t) { return t && !t.startsWith("0001") ? new Date(t).toISOString().replace("T", " ").replace(/\..*/, "") : "–"; }

// ---- charts: small hand-written SVG ----
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#f59e0b", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#9ca3af"];
// MAX_POINTS bounds what one chart draws: a longer run is drawn in bins of
// consecutive steps (means for rates, sums for stacked counts), a bin
// linking to its first step; the steps table below has every step.
const MAX_POINTS = 200;
function binned(steps, series, stacked) {
  if (steps.length <= MAX_POINTS) return [steps, series];
  const w = Math.ceil(steps.length / MAX_POINTS);
  const bs = [];
  for (let i = 0; i < steps.length; i += w) bs.push(steps[i]);
  const agg = (vals) => bs.map((_, j) => {
    const part = vals.slice(j * w, j * w + w).filter((x) => x != null);
    if (!part.length) return null;
    const sum = part.reduce((a, b) => a + b, 0);
    return stacked ? sum : sum / part.length;
  });
  return [bs, series.map((s) => ({ ...s, values: agg(s.values), ...(s.lo ? { lo: agg(s.lo), hi: agg(s.hi) } : {}) }))];
}
function chart(title, steps, series, o = {}) {
  [steps, series] = binned(steps, series, o.stacked);
  const W = 420, H = 150, L = 36, R = 8, T = 8, B = 18;
  const n = steps.length;
  let max = o.max ?? 0, min = 0;
  series.forEach((s) => s.values.forEach((x, i) => {
    const y = o.stacked ? series.reduce((a, t) => a + (t.values[i] || 0), 0) : x;
    if (y > max) max = y;
    if (y != null && y < min) min = y;
    if (s.lo && s.lo[i] != null) { min = Math.min(min, s.lo[i]); max = Math.max(max, s.hi[i]); }
  }));
  (o.refs || []).forEach((r) => { if (r.value > max) max = r.value; });
  if (max <= min) max = min + 1;
  const xw = (W - L - R) / Math.max(n, 1);
  const X = (i) => L + xw * (i + 0.5);
  const Y = (y) => T + (H - T - B) * (1 - (y - min) / (max - min));
  const fmt = o.pct ? (x) => (100 * x).toFixed(x * 100 < 10 ? 1 : 0) + "%" : (x) => (x >= 1000 ? (x / 1000).toFixed(1) + "k" : num(x, 2));
  let g = `<line x1="${L}" y1="${Y(0)}" x2="${W - R}" y2="${Y(0)}" stroke="#cbd5e1"/>`;
  g += `<text x="${L - 3}" y="${Y(max) + 8}" font-size="9" text-anchor="end" fill="#6b7580">${fmt(max)}</text><text x="${L - 3}" y="${Y(0)}" font-size="9" text-anchor="end" fill="#6b7580">0</text>${min < 0 ? `<text x="${L - 3}" y="${Y(min)}" font-size="9" text-anchor="end" fill="#6b7580">${fmt(min)}</text>` : ""}`;
  const every = Math.ceil(n / 12);
  steps.forEach((s, i) => { if (i % every === 0) g += `<text x="${X(i)}" y="${H - 4}" font-size="9" text-anchor="middle" fill="#6b7580">${s}</text>`; });
  if (o.stacked) {
    const base = new Array(n).fill(0);
    series.forEach((s, si) => s.values.forEach((x, i) => {
      if (!x) return;
      const y0 = Y(base[i]), y1 = Y(base[i] + x);
      base[i] += x;
      g += `<rect class="pt" data-step="${steps[i]}" x="${X(i) - xw * 0.35}" y="${y1}" width="${xw * 0.7}" height="${Math.max(y0 - y1, 0.5)}" fill="${s.color || COLORS[si]}"><title>step ${steps[i]} · ${esc(s.name)}: ${x}</title></rect>`;
    }));
  } else {
    series.forEach((s, si) => {
      const c = s.color || COLORS[si];
      if (s.lo) {
        const up = s.hi.map((x, i) => (x == null ? null : [X(i), Y(x)])).filter(Boolean);
        const down = s.lo.map((x, i) => (x == null ? null : [X(i), Y(x)])).filter(Boolean).reverse();
        if (up.length > 1) g += `<polygon class="band" fill="${c}" fill-opacity="0.15" stroke="none" points="${up.concat(down).map((p) => p.join(",")).join(" ")}"/>`;
      }
      const pts = s.values.map((x, i) => (x == null ? null : [X(i), Y(x)])).filter(Boolean);
      if (pts.length > 1) g += `<polyline fill="none" stroke="${c}" stroke-width="1.5" points="${pts.map((p) => p.join(",")).join(" ")}"/>`;
      if (n <= 200) s.values.forEach((x, i) => { if (x != null) g += `<circle class="pt" data-step="${steps[i]}" cx="${X(i)}" cy="${Y(x)}" r="3" fill="${c}"><title>step ${steps[i]} · ${esc(s.name)}: ${fmt(x)}</title></circle>`; });
    });
  }
  (o.refs || []).forEach((r) => {
    g += `<line x1="${L}" x2="${W - R}" y1="${Y(r.value)}" y2="${Y(r.value)}" stroke="#6b7280" stroke-dasharray="4 3"/><text x="${W - R}" y="${Y(r.value) - 2}" font-size="9" text-anchor="end" fill="#6b7280">${esc(r.label)} ${fmt(r.value)}</text>`;
  });
  const legend = series.map((s, si) => `<span><i style="background:${s.color || COLORS[si]}"></i>${esc(s.name)}</span>`).join("");
  return `<div class="chart" data-chart="${esc(o.id || title)}"><h3>${esc(title)}</h3><svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">${g}</svg><div class="legend">${legend}</div></div>`;
}
// histSeries turns [{value, n}] lists per step into stacked series by value.
function histSeries(lists) {
  const keys = [...new Set(lists.flatMap((l) => (l || []).map((c) => c.value)))].sort((a, b) => a - b);
  return keys.map((k, i) => ({ name: "staleness " + k, color: COLORS[i % COLORS.length], values: lists.map((l) => ((l || []).find((c) => c.value === k) || {}).n || 0) }));
}

// ---- filters on lists, kept in the hash so they are part of the deep link ----
function filterBar(fields, q) {
  return `<form class="filters" data-filters>${fields.map((f) => {
    if (f.options) return `<label>${esc(f.label)} <select name="${f.name}"><option value="">any</option>${f.options.map((o) => `<option${q.get(f.name) === o ? " selected" : ""}>${esc(o)}</option>`).join("")}</select></label>`;
    return `<label>${esc(f.label)} <input name="${f.name}" size="${f.size || 10}" value="${esc(q.get(f.name) || "")}" placeholder="${esc(f.ph || "")}"></label>`;
  }).join("")}</form>`;
}
function bindFilters(root) {
  const form = $("[data-filters]", root);
  if (!form) return;
  const apply = () => {
    const [path, query] = location.hash.split("?");
    const q = new URLSearchParams();
    // Filters apply to the page of a paged list shown: it stays.
    const page = new URLSearchParams(query || "").get("page");
    if (page) q.set("page", page);
    new FormData(form).forEach((val, k) => { if (val !== "") q.set(k, val); });
    const h = path + (q.toString() ? "?" + q : "");
    history.replaceState(null, "", h);
    render(true);
  };
  form.addEventListener("change", apply);
  form.addEventListener("submit", (e) => { e.preventDefault(); apply(); });
}
const ATTEMPT_FILTERS = (rows) => [
  { name: "q", label: "ids", ph: "attempt, group, task", size: 14 },
  { name: "task", label: "task", options: [...new Set(rows.map((r) => r.task))].sort() },
  { name: "outcome", label: "outcome", options: [...new Set(rows.map((r) => r.outcome))].sort() },
  { name: "rmin", label: "reward ≥", size: 4 }, { name: "rmax", label: "≤", size: 4 },
  { name: "drop", label: "drop reason", options: ["zero_signal", "unadmitted", "infra_lost", "fully_stale"] },
  { name: "stale", label: "max staleness ≥", size: 3 },
  { name: "finish", label: "finish", options: ["tool_call", "stop", "length"] },
];
function filterAttempts(rows, q) {
  const f = (k) => q.get(k);
  const needle = (f("q") || "").toLowerCase();
  return rows.filter((r) => (!needle || (r.attempt + " " + r.group + " " + r.task).toLowerCase().includes(needle))
    && (!f("task") || r.task === f("task")) && (!f("outcome") || r.outcome === f("outcome"))
    && (!f("rmin") || (r.reward != null && r.reward >= Number(f("rmin")))) && (!f("rmax") || (r.reward != null && r.reward <= Number(f("rmax"))))
    && (!f("drop") || r.drop_reason === f("drop")) && (!f("stale") || (r.max_staleness != null && r.max_staleness >= Number(f("stale"))))
    && (!f("finish") || r.finish === f("finish")));
}
// ATTEMPT_SORT is the value each column of the attempts table sorts by.
const ATTEMPT_SORT = [(r) => r.attempt, (r) => r.group, (r) => r.task, (r) => r.slot, (r) => r.outcome, (r) => (r.passed == null ? "" : r.passed ? "pass" : "fail"),
  (r) => r.score, (r) => r.bonus, (r) => r.reward, (r) => r.advantage, (r) => r.turns, (r) => r.completion_tokens, (r) => r.max_staleness, (r) => r.finish,
  (r) => (r.batch ? "batch " + r.batch : r.drop_reason || "")];
const ATTEMPT_NUM = new Set([3, 6, 7, 8, 9, 10, 11, 12]);
function attemptsTable(run, rows, q, limit = 2000) {
  let shown = filterAttempts(rows, q);
  const st = sortState[viewPath() + "|attempts"];
  if (st) shown = sortRows(shown, ATTEMPT_SORT[st.col], ATTEMPT_NUM.has(st.col), st.dir);
  const body = shown.slice(0, limit).map((r) => `<tr class="click" data-href="${esc(hAttempt(run, r.attempt))}" data-row="${esc(r.attempt)}">
    <td>${link(hAttempt(run, r.attempt), r.attempt)}</td><td>${link(hGroup(run, r.group), r.group)}</td><td>${link(hTask(run, r.task), r.task)}</td>
    <td class="num" data-sort="${r.slot}">${r.slot}${r.retry_of ? " ↺" : ""}</td><td>${esc(r.outcome)}</td><td>${verdict(r, true)}</td>
    <td class="num">${v("score", r.score)}</td><td class="num">${v("bonus", r.bonus)}</td><td class="num">${v("reward", r.reward)}</td><td class="num">${v("advantage", r.advantage)}</td>
    <td class="num">${r.turns}</td><td class="num">${r.completion_tokens}</td><td class="num">${r.max_staleness ?? "–"}</td><td>${esc(r.finish)}</td>
    <td>${r.batch ? link(hStep(run, r.batch), "batch " + r.batch) : esc(r.drop_reason || "")}</td></tr>`).join("");
  return `<div class="muted" data-k="shown" data-v="${shown.length}">${shown.length} of ${rows.length} attempts${shown.length > limit ? ` (first ${limit} shown)` : ""}</div>
  <table data-sort-id="attempts" data-sorted="1"><thead><tr><th>attempt</th><th>group</th><th>task</th><th class="num">slot</th><th>outcome</th><th>verdict</th><th class="num">score</th><th class="num">bonus</th><th class="num">reward</th><th class="num">advantage</th><th class="num">turns</th><th class="num">tokens</th><th class="num">staleness</th><th>finish</th><th>batch</th></tr></thead><tbody>${body}</tbody></table>`;
}

// ---- sortable tables: a click on a header sorts by its column, a second
// click the other way; the sort is stable, numbers (a "num" column) sort
// as numbers, the rest as text with numbers in it ("batch 9" before
// "batch 10"), and a missing value ("–") sorts last either way ----
const sortState = {}; // by view path and table: {col, dir}
const viewPath = () => location.hash.split("?")[0];
const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
function sortRows(rows, value, numeric, dir) {
  const missing = (x) => x == null || x === "" || (numeric && Number.isNaN(x));
  return rows.map((r, i) => [r, value(r), i]).sort((x, y) => {
    const ma = missing(x[1]), mb = missing(y[1]);
    if (ma || mb) return ma === mb ? x[2] - y[2] : ma ? 1 : -1;
    const c = numeric ? x[1] - y[1] : collator.compare(String(x[1]), String(y[1]));
    return c ? c * dir : x[2] - y[2];
  }).map((x) => x[0]);
}
function cellValue(td, numeric) {
  const raw = td.dataset.sort ?? td.textContent.trim();
  if (!numeric) return raw === "–" ? "" : raw;
  return parseFloat(String(raw).replace(/[,%↺\s]/g, ""));
}
// bindSort makes every table of root with a header sortable, and applies
// the sort chosen before (a refresh keeps it).
function bindSort(root) {
  root.querySelectorAll("table").forEach((table, i) => {
    if (!table.tHead) return;
    const key = viewPath() + "|" + (table.dataset.sortId || i);
    [...table.tHead.rows[0].cells].forEach((th, col) => {
      th.classList.add("sortable");
      th.addEventListener("click", () => {
        const st = sortState[key];
        sortState[key] = { col, dir: st && st.col === col ? -st.dir : 1 };
        if (table.dataset.sorted) render(true); // sorted with its data (a list longer than it draws)
        else applySort(table, key);
      });
    });
    applySort(table, key);
  });
}
function applySort(table, key) {
  const st = sortState[key];
  [...table.tHead.rows[0].cells].forEach((th, c) => {
    th.setAttribute("aria-sort", st && st.col === c ? (st.dir > 0 ? "ascending" : "descending") : "none");
  });
  if (!st || table.dataset.sorted || !table.tBodies[0]) return;
  const numeric = table.tHead.rows[0].cells[st.col].classList.contains("num");
  const body = table.tBodies[0];
  body.append(...sortRows([...body.rows], (tr) => (tr.cells[st.col] ? cellValue(tr.cells[st.col], numeric) : null), numeric, st.dir));
}

// ---- keyboard: j/k move through the view's rows (an attempt's turns),
// n/p go to the next/previous attempt or step, Enter opens the row, "/"
// searches, "?" helps, Esc closes; nothing fires while typing ----
RL.nav = {};
let selected = -1;
const navItems = () => {
  const main = $("#main");
  const marked = [...main.querySelectorAll("[data-nav]")];
  return marked.length ? marked : [...main.querySelectorAll("tbody tr[data-href]")];
};
function select(i, opts = {}) {
  const items = navItems();
  if (!items.length) return;
  selected = Math.max(0, Math.min(items.length - 1, i));
  items.forEach((el, j) => el.classList.toggle("sel", j === selected));
  const el = items[selected];
  if (!opts.quiet) el.scrollIntoView({ block: el.dataset.navHref ? "start" : "nearest" });
  if (el.dataset.navHref && !opts.quiet) {
    // The turn's deep link, without redrawing the view.
    history.replaceState(null, "", el.dataset.navHref);
    current.key = location.hash;
  }
}
const HELP = [["j / k", "next / previous row; on an attempt, its next / previous turn"], ["n / p", "next / previous attempt (on an attempt) or step (on a step)"],
  ["Enter", "open the selected row"], ["/", "search the run's text"], ["?", "this help"], ["Esc", "close the help, leave a field"]];
function toggleHelp(show) {
  const h = $("#help");
  h.hidden = show === undefined ? !h.hidden : !show;
}
addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  const typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
  if (e.key === "Escape") {
    if (!$("#help").hidden) toggleHelp(false);
    else if (typing) t.blur();
    return;
  }
  if (typing) return;
  switch (e.key) {
    case "j": select(selected + 1); break;
    case "k": select(selected < 0 ? 0 : selected - 1); break;
    case "n": if (RL.nav.next) location.hash = RL.nav.next; break;
    case "p": if (RL.nav.prev) location.hash = RL.nav.prev; break;
    case "Enter": { const el = navItems()[selected]; if (el && el.dataset.href) location.hash = el.dataset.href; break; }
    case "/": { const f = $("#searchq"); if (f && !$("#searchform").hidden) { e.preventDefault(); f.focus(); f.select(); } break; }
    case "?": toggleHelp(); break;
    default: return;
  }
});

// ---- a turn-by-turn diff of two texts, by words ----
// words splits a text into words, each with the blanks after it.
const words = (s) => String(s || "").match(/\s+|\S+\s*/g) || [];
let lcsBuf = new Uint16Array(0);
// diffHTML writes b with the words that are not in a marked <ins>: by a
// longest common subsequence of words (their common start and end set
// aside first), or, for texts too long for one, what lies between their
// common start and end.
function diffHTML(a, b) {
  if (a === b) return esc(b);
  const A = words(a), B = words(b);
  let pre = 0;
  while (pre < A.length && pre < B.length && A[pre] === B[pre]) pre++;
  let suf = 0;
  while (suf < A.length - pre && suf < B.length - pre && A[A.length - 1 - suf] === B[B.length - 1 - suf]) suf++;
  const out = [[B.slice(0, pre).join(""), false]];
  const push = (w, ins) => { const last = out[out.length - 1]; if (last[1] === ins) last[0] += w; else out.push([w, ins]); };
  const n = A.length - pre - suf, m = B.length - pre - suf;
  if (n * m > 250000) {
    push(B.slice(pre, pre + m).join(""), true);
  } else {
    // Words as numbers, so the table compares integers.
    const ids = new Map();
    const id = (w) => { let x = ids.get(w); if (x === undefined) ids.set(w, (x = ids.size)); return x; };
    const X = Int32Array.from(A.slice(pre, pre + n), id), Y = Int32Array.from(B.slice(pre, pre + m), id);
    const w = m + 1;
    if (lcsBuf.length < (n + 1) * w) lcsBuf = new Uint16Array((n + 1) * w);
    const L = lcsBuf;
    for (let j = 0; j <= m; j++) L[n * w + j] = 0;
    for (let i = n - 1; i >= 0; i--) {
      const r = i * w, r1 = r + w;
      L[r + m] = 0;
      for (let j = m - 1; j >= 0; j--) L[r + j] = X[i] === Y[j] ? L[r1 + j + 1] + 1 : Math.max(L[r1 + j], L[r + j + 1]);
    }
    let i = 0, j = 0;
    while (j < m) {
      if (i < n && X[i] === Y[j]) { push(B[pre + j], false); i++; j++; } else if (i < n && L[(i + 1) * w + j] >= L[i * w + j + 1]) i++; else { push(B[pre + j], true); j++; }
    }
  }
  push(B.slice(B.length - suf).join(""), false);
  return out.map(([t, ins]) => (ins && t ? `<ins>${esc(t)}</ins>` : esc(t))).join("");
}

// ---- compare runs: picked on the runs list, kept for the tab ----
const compareSel = new Set(JSON.parse(sessionStorage.getItem("rl-compare") || "[]"));
function bindCompare() {
  document.querySelectorAll("[data-pick]").forEach((box) => box.addEventListener("change", () => {
    if (box.checked) compareSel.add(box.dataset.pick); else compareSel.delete(box.dataset.pick);
    sessionStorage.setItem("rl-compare", JSON.stringify([...compareSel]));
    render(true);
  }));
}
// catalogue names the catalogue versions of a run's facts in words.
const catalogue = (vs) => (vs.length ? "version" + (vs.length > 1 ? "s " : " ") + vs.join(" and ") : "–");

// trendCharts are the charts researchers look at first, one series per
// run: rewards (mean, and the middle half of them as a band), the
// trainer's loss and grad norm, completion tokens per step, and the
// staleness of the tokens trained (their mean; one run's as a histogram).
function trendCharts(steps, runs) {
  const per = (f) => runs.map((r, i) => {
    const at = new Map(r.steps.map((st) => [st.step, st]));
    return { name: r.name, color: COLORS[i], values: steps.map((s) => (at.has(s) ? f(at.get(s)) : null)) };
  });
  const band = (f, g) => runs.map((r, i) => {
    const at = new Map(r.steps.map((st) => [st.step, st]));
    const val = (fn) => steps.map((s) => (at.has(s) && at.get(s).reward_spread ? fn(at.get(s).reward_spread) : null));
    return { name: r.name + (runs.length > 1 ? "" : " median, middle half shaded"), color: COLORS[i], values: val((x) => x.median), lo: val(f), hi: val(g) };
  });
  const meanStale = (st) => {
    const c = st.trained_token_staleness || [];
    const n = c.reduce((a, x) => a + x.n, 0);
    return n ? c.reduce((a, x) => a + x.value * x.n, 0) / n : null;
  };
  const one = runs.length === 1;
  return [
    chart("mean reward", steps, per((s) => s.mean_reward), { id: "mean_reward" }),
    chart("reward spread", steps, band((x) => x.q1, (x) => x.q3), { id: "reward_spread" }),
    chart("loss (trainer)", steps, per((s) => (s.trained ? s.loss : null)), { id: "loss" }),
    chart("grad norm (trainer)", steps, per((s) => s.grad_norm), { id: "grad_norm" }),
    chart("completion tokens per step", steps, per((s) => s.completion_tokens), { id: "tokens" }),
    one ? chart("trained tokens by staleness", steps, histSeries(runs[0].steps.map((s) => s.trained_token_staleness)), { stacked: true, id: "trained_staleness" })
      : chart("mean staleness of trained tokens", steps, per(meanStale), { id: "trained_staleness" }),
  ];
}

// ---- search: pages of hits kept while the query stays ----
let searchState = { key: "" };
function bindMore() {
  const b = $("[data-more-hits]");
  if (!b) return;
  b.addEventListener("click", async () => {
    b.disabled = true;
    const [, q, [run]] = route();
    try {
      const page = await get(runBase(run, "search"), { q: q.get("q"), cursor: searchState.next, ...(q.get("limit") ? { limit: q.get("limit") } : {}) });
      searchState = { ...searchState, ...page, hits: searchState.hits.concat(page.hits) };
    } catch (e) { b.textContent = e.message; return; }
    render(true);
  });
}

// ---- views ----
const views = {
  async runs(q) {
    const d = await get(["v1", "explore", "runs"]);
    setCrumbs([["#/", "runs"]]);
    const rows = d.runs.filter((r) => !q.get("q") || r.run.toLowerCase().includes(q.get("q").toLowerCase()));
    const picked = [...compareSel].filter((r) => d.runs.some((x) => x.run === r));
    const cmp = picked.length >= 2 && picked.length <= 4;
    return { data: d, after: bindCompare, html: `<h1>Runs</h1>${filterBar([{ name: "q", label: "search", ph: "run id" }], q)}
    <p class="compare"><a data-compare ${cmp ? `href="${esc("#/compare?runs=" + picked.map(enc).join(","))}"` : 'class="off"'}>compare ${picked.length} runs</a>
      <span class="muted">tick 2 to 4 runs to overlay their trends</span></p>
    <table><thead><tr><th title="compare">⇄</th><th>run</th><th>status</th><th class="num">facts</th><th class="num">batches</th><th class="num">admitted</th><th class="num">rejected</th><th class="num">findings</th><th>fact formats</th><th>last activity</th></tr></thead><tbody>
    ${rows.map((r) => `<tr class="click" data-href="${esc(hRun(r.run))}" data-row="${esc(r.run)}"><td data-sort="${compareSel.has(r.run) ? 0 : 1}"><input type="checkbox" data-pick="${esc(r.run)}"${compareSel.has(r.run) ? " checked" : ""} aria-label="compare ${esc(r.run)}"></td><td>${link(hRun(r.run), r.run)}</td><td>${r.status === "live" ? '<span class="ok">live</span>' : "idle"}</td>
      <td class="num">${v("facts", r.facts)}</td><td class="num">${v("batches", r.batches)}</td><td class="num">${v("tasks_admitted", r.tasks_admitted)}</td><td class="num">${v("tasks_rejected", r.tasks_rejected)}</td><td class="num">${v("findings", r.findings)}</td><td title="catalogue versions of its facts">${catalogue(r.catalogue)}</td><td>${ts(lastSeen(r))}</td></tr>`).join("")}
    </tbody></table>${rows.length ? "" : '<p class="muted">no runs</p>'}` };
  },

  async run(q, run) {
    const d = await get(runBase(run));
    setCrumbs([["#/", "runs"], [hRun(run), run]]);
    const S = d.steps, steps = S.map((s) => s.step);
    const col = (f) => S.map(f);
    const drops = ["zero_signal", "unadmitted", "infra_lost", "fully_stale"];
    const dropCount = (s, r) => ((s.dropped || []).find((x) => x.name === r) || {}).n || 0;
    const charts = [
      chart("pass rate", steps, [{ name: "pass rate", values: col((s) => s.pass_rate) }], { pct: true, id: "pass_rate" }),
      chart("groups dropped, by reason", steps, drops.map((r, i) => ({ name: r, color: COLORS[i + 1], values: col((s) => dropCount(s, r)) })), { stacked: true, id: "drops" }),
      chart("zero-signal drop rate", steps, [{ name: "zero_signal", values: col((s) => s.zero_signal_rate) }], { pct: true, refs: [{ value: d.reference.zero_signal_rate, label: "recipe" }], id: "zero_signal" }),
      chart("masked-token share", steps, [{ name: "masked tokens", color: COLORS[3], values: col((s) => s.masked_token_fraction) }], { pct: true, id: "masked" }),
      chart("staleness in flight (attempts)", steps, histSeries(col((s) => s.in_flight)), { stacked: true, id: "in_flight" }),
      chart("staleness in queue (attempts)", steps, histSeries(col((s) => s.in_queue)), { stacked: true, id: "in_queue" }),
      chart("tokens per solve", steps, [{ name: "tokens/solve", color: COLORS[4], values: col((s) => s.tokens_per_solve) }], { id: "tokens_per_solve" }),
      chart("infra-lost rate", steps, [{ name: "infra_lost", color: COLORS[1], values: col((s) => s.infra_lost_rate) }], { pct: true, refs: [{ value: d.reference.infra_lost_rate, label: "recipe" }], id: "infra_lost" }),
      chart("admission funnel (tasks)", steps, [
        { name: "registered", values: col((s) => s.funnel.registered) }, { name: "probed", color: COLORS[5], values: col((s) => s.funnel.probed) },
        { name: "admitted", color: COLORS[2], values: col((s) => s.funnel.admitted) }, { name: "rejected", color: COLORS[1], values: col((s) => s.funnel.rejected) }], { id: "funnel" }),
      ...trendCharts(steps, [{ name: run, steps: S }]),
      chart("truncated share (trainer)", steps, [{ name: "truncated", color: COLORS[5], values: col((s) => (s.trained ? s.truncated_fraction : null)) }],
        { pct: true, refs: [{ value: d.reference.truncated_low, label: "recipe low" }, { value: d.reference.truncated_high, label: "high" }], id: "truncated" }),
    ];
    // The table shows 100 of the view's steps (a long run's newest), or,
    // with ?steps=all, a page of the steps list, which has every one.
    const all = q.get("steps") === "all";
    const page = all ? await get(runBase(run, "steps"), { cursor: q.get("page") || "", limit: 500 }) : null;
    const shown = all ? page.steps : d.steps_sampled ? S.slice(-100) : S.slice(0, 100);
    const rows = shown.map((s) => `<tr class="click" data-href="${esc(hStep(run, s.step))}" data-row="${s.step}"><td>${link(hStep(run, s.step), "step " + s.step)}</td>
      <td class="num">${v("groups-" + s.step, s.groups)}</td><td class="num">${v("attempts-" + s.step, s.attempts)}</td><td class="num">${v("pass_rate-" + s.step, s.pass_rate, pct(s.pass_rate))}</td>
      <td>${drops.map((r) => dropCount(s, r) ? `${r} ${dropCount(s, r)}` : "").filter(Boolean).join(", ") || "–"}</td>
      <td class="num">${v("masked_token_fraction-" + s.step, s.masked_token_fraction, pct(s.masked_token_fraction))}</td><td class="num">${v("tokens_per_solve-" + s.step, s.tokens_per_solve, num(s.tokens_per_solve, 0))}</td>
      <td class="num">${v("infra_lost_rate-" + s.step, s.infra_lost_rate, pct(s.infra_lost_rate))}</td><td class="num">${s.trained ? v("loss-" + s.step, s.loss) : "–"}</td><td>${s.trained ? (s.digest_matches ? '<span class="ok">digest ✓</span>' : '<span class="bad">digest ✗</span>') : "not trained yet"}</td></tr>`).join("");
    return { data: d, html: `<h1>Run ${esc(run)} <span class="pill">${esc(d.status)}</span></h1>
    <div class="cards">${card("facts", "facts", d.facts)}${card("batches sealed", "batches", d.batches)}${card("tasks admitted", "tasks_admitted", d.tasks_admitted)}${card("tasks rejected", "tasks_rejected", d.tasks_rejected)}${card("findings", "findings", d.findings)}${card("train groups in flight", "groups_in_flight", d.groups_in_flight)}${card("max staleness", "max_staleness", d.config.max_staleness)}${card("fact catalogue", "catalogue", d.catalogue.join(","), catalogue(d.catalogue))}</div>
    <p>${link(hRun(run) + "/attempts", "all attempts")} · ${link(hRun(run) + "/tasks", "all tasks")} · last activity ${ts(lastSeen(d))}</p>
    ${S.length ? "" : '<p class="muted" data-k="no_batch">no sealed batch yet: the charts and steps appear with the first</p>'}
    ${d.steps_sampled ? `<p class="muted" data-k="steps-sampled" data-v="${S.length}">the charts show ${S.length} of the run's ${d.steps_total} steps: the newest each, older ones evenly spaced</p>` : ""}
    <div class="grid">${charts.join("")}</div>
    <h2>Steps</h2><table><thead><tr><th>step</th><th class="num">groups</th><th class="num">attempts</th><th class="num">pass rate</th><th>dropped</th><th class="num">masked tokens</th><th class="num">tokens/solve</th><th class="num">infra lost</th><th class="num">loss</th><th>trainer</th></tr></thead><tbody>${rows}</tbody></table>
    ${!all && d.steps_total > 100 ? `<p>${link(hRun(run) + "?steps=all", "show all " + d.steps_total + " steps")}</p>` : ""}
    ${all && (page.next || q.get("page")) ? `<p class="muted" data-k="steps-page">steps ${shown.length ? shown[0].step + "–" + shown[shown.length - 1].step : ""} of ${page.total}${q.get("page") ? " · " + link(hRun(run) + "?steps=all", "first page") : ""}${page.next ? " · " + link(hRun(run) + "?steps=all&page=" + enc(page.next), "next page") : ""}</p>` : ""}
    ${d.finding_list.length ? `<h2>Findings</h2><table><thead><tr><th>#</th><th>kind</th><th>fact</th><th>detail</th></tr></thead><tbody>${d.finding_list.map((f) => `<tr><td>${f.seq || "–"}</td><td>${esc(f.kind)}</td><td>${f.fact.seq || `partition ${f.fact.partition}, offset ${f.fact.offset} (outside the run's partition)`}</td><td style="white-space:normal">${esc(f.detail)}${f.attempt ? " · " + link(hAttempt(run, f.attempt), f.attempt) : f.group ? " · " + link(hGroup(run, f.group), f.group) : ""}</td></tr>`).join("")}</tbody></table>` : ""}` };
  },

  async step(q, run, seq) {
    const d = await get(runBase(run, "steps", seq));
    setCrumbs([["#/", "runs"], [hRun(run), run], [hStep(run, seq), "step " + seq]]);
    const rows = d.groups.flatMap((g) => g.attempts);
    const gr = d.gradient;
    RL.nav = { prev: +seq > 1 ? hStep(run, +seq - 1) : "", next: d.next ? hStep(run, +seq + 1) : "" };
    return { data: d, html: `<h1>Step ${v("seq", d.seq)} <span class="muted">(batch ${d.seq}, sealed while the trainer was at policy version ${d.trainer_version})</span></h1>
    <p>${+seq > 1 ? link(hStep(run, +seq - 1), "← step " + (+seq - 1)) : ""} ${d.next ? link(hStep(run, +seq + 1), "step " + (+seq + 1) + " →") : '<span class="muted" data-k="last_step">last sealed step</span>'} <span class="muted">(n / p)</span></p>
    <table class="kv" style="width:auto"><tbody>
      <tr><td>digest</td><td><code data-k="digest">${esc(d.digest)}</code></td></tr>
      <tr><td>watermark</td><td>the log up to fact ${d.tree.size}</td></tr>
      <tr><td>tree head</td><td>size ${v("tree_size", d.tree.size)}, root <code data-k="tree_root">${esc(d.tree.root)}</code></td></tr>
      <tr><td>stats</td><td>${v("groups", d.stats.groups)} groups, ${v("attempts", d.stats.attempts)} attempts, ${v("turns", d.stats.turns)} turns (${v("trained_turns", d.stats.trained_turns)} trained), ${v("trained_tokens", d.stats.trained_tokens)} trained / ${v("masked_tokens", d.stats.masked_tokens)} masked tokens</td></tr>
      <tr><td>gradient.applied</td><td>${gr ? `step ${v("gradient_step", gr.step)}, loss ${v("loss", gr.loss, num(gr.loss, 4))}, trained tokens ${v("gradient_trained_tokens", gr.trained_tokens)}, truncated ${v("truncated_fraction", gr.truncated_fraction, pct(gr.truncated_fraction))}, logprob gap ${esc(Object.entries(gr.logprob_gap || {}).map(([k, x]) => "s" + k + ": " + num(x, 4)).join(", ") || "–")}, version ${gr.from_version}→${gr.to_version}, fact ${gr.fact.seq} ${gr.digest_matches ? '<span class="ok">digest matches</span>' : '<span class="bad">digest differs</span>'}` : '<span class="muted" data-k="gradient_step" data-v="">not consumed yet</span>'}</td></tr>
    </tbody></table>
    <details class="audit"><summary>log positions, for auditors</summary>watermark: partition ${d.watermark.partition}, offset ${v("watermark_offset", d.watermark.offset)} · batch.sealed caused by fact ${d.decision_fact.seq} (partition ${d.decision_fact.partition}, offset ${d.decision_fact.offset})${d.groups.map((g) => ` · ${esc(g.group)} completed at partition ${g.completed.partition}, offset ${g.completed.offset}`).join("")}</details>
    <h2>Groups (${d.groups.length})</h2>
    <table><thead><tr><th>group</th><th>task</th><th class="num">attempts</th><th class="num">passed</th><th>rewards</th></tr></thead><tbody>${d.groups.map((g) => `<tr class="click" data-href="${esc(hGroup(run, g.group))}" data-row="${esc(g.group)}"><td>${link(hGroup(run, g.group), g.group)}</td><td>${link(hTask(run, g.task), g.task)}</td><td class="num">${g.attempts.length}</td><td class="num">${g.attempts.filter((a) => a.passed).length}</td><td>${g.attempts.map((a) => num(a.reward, 2)).join(" ")}</td></tr>`).join("")}</tbody></table>
    <h2>Dropped groups (${v("dropped", d.dropped.length)})</h2>
    <table><thead><tr><th>group</th><th>task</th><th>reason</th></tr></thead><tbody>${d.dropped.map((g) => `<tr class="click" data-href="${esc(hGroup(run, g.group))}"><td>${link(hGroup(run, g.group), g.group)}</td><td>${link(hTask(run, g.task), g.task)}</td><td>${esc(g.reason)}</td></tr>`).join("")}</tbody></table>
    <h2>Attempts</h2>${filterBar(ATTEMPT_FILTERS(rows), q)}${attemptsTable(run, rows, q)}` };
  },

  async group(q, run, id) {
    const [d, side] = await Promise.all([get(runBase(run, "groups", id)), get(runBase(run, "side-by-side", id))]);
    setCrumbs([["#/", "runs"], [hRun(run), run], ...(d.batch ? [[hStep(run, d.batch), "step " + d.batch]] : []), [hGroup(run, id), "group " + id]]);
    const base = side.attempts.find((a) => a.attempt === q.get("base")) || side.attempts[0];
    const cols = d.attempts.map((a) => `<div class="col" data-row="${esc(a.attempt)}"><h3>${link(hAttempt(run, a.attempt), a.attempt)}</h3>
      <div>slot ${v("slot-" + a.attempt, a.slot)}${a.retry_of ? ` · retry of ${link(hAttempt(run, a.retry_of), a.retry_of)}` : ""}${a.retried_by ? ` · retried by ${link(hAttempt(run, a.retried_by), a.retried_by)}` : ""}</div>
      <div>${esc(a.outcome)} · ${verdict(a)}</div>
      <div>turns ${v("turns-" + a.attempt, a.turns)} · tokens ${v("tokens-" + a.attempt, a.completion_tokens)} · tools ${a.tool_calls}</div>
      <div>reward ${v("reward-" + a.attempt, a.reward)} = score ${num(a.score)} + bonus ${num(a.bonus)}</div>
      <div>advantage ${v("advantage-" + a.attempt, a.advantage)}</div>
      <div class="turnbar" data-turnbar="${esc(a.attempt)}">${turnBar(a, d.state)}</div>
      <div class="muted">${base && a.attempt === base.attempt ? "<b>the others are compared with this one</b>" : `<a href="${esc(hGroup(run, id) + "?base=" + enc(a.attempt))}">compare the others with this</a>`}</div></div>`).join("");
    // Turn by turn: each attempt's turn n in its column, its words and
    // tool calls that the base attempt's turn n does not have marked.
    const most = Math.max(0, ...side.attempts.map((a) => a.turn_list.length));
    const all = q.get("turns") === "all";
    const shown = all ? most : Math.min(most, 30);
    const byTurn = side.attempts.map((a) => new Map(a.turn_list.map((t) => [t.turn, t])));
    const turnNums = [...new Set(side.attempts.flatMap((a) => a.turn_list.map((t) => t.turn)))].sort((x, y) => x - y).slice(0, shown);
    const bi = side.attempts.indexOf(base);
    const sig = (c) => c.tool + "\u0000" + (c.input || "");
    const cell = (t, b, isBase) => {
      if (!t) return `<div class="cell none">–</div>`;
      const same = b && !isBase && t.text === b.text && t.tools.length === b.tools.length && t.tools.every((c, k) => sig(c) === sig(b.tools[k]));
      const text = isBase || !b ? esc(t.text) : diffHTML(b.text, t.text);
      const tools = t.tools.map((c, k) => {
        const bc = b && b.tools[k];
        const diff = !isBase && (!bc || sig(bc) !== sig(c));
        return `<div class="tool${diff ? " differs" : ""}" data-tool-differs="${diff}">⚙ <b>${esc(c.tool)}</b> ${isBase || !bc ? esc(c.input) : diffHTML(bc.input, c.input)}${cut(c.input_cut, "")} <span class="${c.exit_code === 0 ? "ok" : "bad"}">→ ${c.exit_code}</span></div>`;
      }).join("");
      return `<div class="cell${same ? " same" : ""}" data-same="${same}">${t.text || t.text_cut ? `<div class="text">${text}${cut(t.text_cut, "")}</div>` : ""}${tools}<div class="muted">${t.completion_tokens} tokens · ${esc(t.finish)}</div></div>`;
    };
    const rows = turnNums.map((n) => `<div class="sbs-row" data-nav data-turn-row="${n}"><div class="lab">turn ${n}</div>${side.attempts.map((a, i) => cell(byTurn[i].get(n), bi >= 0 ? byTurn[bi].get(n) : null, i === bi)).join("")}</div>`).join("");
    return { data: [d, side], html: `<h1>Group ${esc(d.group)} <span class="pill">${esc(d.state)}</span></h1>
    <p>task ${link(hTask(run, d.task), d.task)} · ${esc(d.purpose)} · size ${d.size} · ${v("slots", d.slots)} slots, ${v("attempt_count", d.attempts.length)} attempts · started at fact ${d.started.seq}${d.closed ? " · closed: " + esc(d.closed) : ""}
    ${d.batch ? " · used by " + link(hStep(run, d.batch), "batch " + d.batch) : ""}${d.dropped ? ` · <span class="bad">dropped: ${esc(d.dropped)}</span> (listed by batch ${d.dropped_before_batch})` : ""}</p>
    <p class="muted">side by side, turn by turn: <ins>marked</ins> words and <span class="differs">tool calls</span> differ from ${base ? esc(base.attempt) : "–"}'s same turn; a grey cell is the same.</p>
    <div class="sbs" data-sbs style="--n:${d.attempts.length}"><div class="sbs-row sbs-head"><div class="lab"></div>${cols}</div>${rows}</div>
    ${shown < most ? `<p>${link(hGroup(run, id) + "?" + new URLSearchParams({ ...Object.fromEntries(q), turns: "all" }), "show all " + most + " turns")}</p>` : ""}` };
  },

  async attempt(q, run, id, turnArg) {
    const d = await get(runBase(run, "attempts", id));
    setCrumbs([["#/", "runs"], [hRun(run), run], ...(d.batch ? [[hStep(run, d.batch), "step " + d.batch]] : []), [hGroup(run, d.group), "group " + d.group], [hAttempt(run, id), id]]);
    const mode = q.get("overlay") || "mask";
    const query = q.get("hl") || "";
    const ids = q.get("tokens") === "ids" || !d.vocabulary;
    const keep = (h) => h + (q.toString() ? "?" + q : "");
    RL.attempt = d;
    RL.nav = { next: d.next_attempt ? keep(hAttempt(run, d.next_attempt)) : "", prev: d.prev_attempt ? keep(hAttempt(run, d.prev_attempt)) : "" };
    const turns = d.turn_list.map((t, i) => `<div class="turn${turnArg != null && +turnArg === t.turn ? " target sel" : ""}" data-turn="${i}" data-turn-n="${t.turn}" data-nav data-nav-href="${esc(keep(hTurn(run, id, t.turn)))}">
      <div class="hd"><b>${link(keep(hTurn(run, id, t.turn)), "turn " + t.turn)}</b><span>${v("prompt-" + t.turn, t.prompt_tokens)} prompt · ${v("completion-" + t.turn, t.completion_tokens)} completion · ${t.cached_tokens} cached</span>
        <span>finish ${esc(t.finish)}</span><span>${t.latency_ms} ms</span><span>${t.segments.map((s) => (s.start ? "from token " + s.start + ": " : "") + policy(s, t.judged)).join("; ")}</span></div>
      ${cutText(t.text, t.text_cut, "text_cut-" + t.turn, query)}
      <div class="toks" data-toks="${i}" style="min-height:${t.token_ids.length ? Math.min(400, Math.ceil(t.token_ids.length / 12) * 19) : 0}px"></div>${t.token_ids.length ? "" : segBar(t)}${t.tokens_gone ? `<div class="muted" data-k="tokens_gone-${t.turn}">${esc(t.tokens_gone)}</div>` : ""}
      ${t.tools.map((c) => `<div class="tool">⚙ <b>${esc(c.tool)}</b> call ${c.call} · exit ${c.exit_code === 0 ? '<span class="ok">0</span>' : `<span class="bad">${c.exit_code}</span>`} · ${c.duration_ms} ms · ${c.output_bytes} B${c.timed_out ? ' · <span class="bad">timed out</span>' : ""}${c.background ? " · background" : ""}${cutText(c.input, c.input_cut, `input_cut-${t.turn}-${c.call}`, query)}${cutText(c.output, c.output_cut, `output_cut-${t.turn}-${c.call}`, query)}</div>`).join("")}
      <div class="lineage">lineage: <span class="pill ${esc(t.lineage.state)}" data-k="lineage-${t.turn}" data-v="${esc(t.lineage.state)}">${esc(t.lineage.state)}</span> ${t.lineage.batch ? link(hStep(run, t.lineage.batch), "batch " + t.lineage.batch) : ""}${t.lineage.gradient_step != null ? " · gradient step " + t.lineage.gradient_step : ""} · ${esc(t.lineage.reason)}</div>
      ${t.compaction ? `<div class="compaction">context compacted: ${t.compaction.tokens_before} → ${t.compaction.tokens_after} tokens (a new training segment starts)</div>` : ""}
      <details class="audit"><summary>for auditors</summary>turn.generated is fact ${t.fact.seq}: partition ${t.fact.partition}, offset ${t.fact.offset}</details></div>`).join("");
    const overlays = { mask: "loss mask", logprob: "log-prob", version: "policy version / staleness", advantage: "advantage", none: "none" };
    const legend = { mask: "green trains, amber masked, grey not in a batch", logprob: "darker = less likely", version: "hue by staleness; red beyond max_staleness " + d.config_max_staleness,
      advantage: "trained tokens green for a positive advantage, red for a negative one (" + num(d.advantage) + "); grey masked or not in a batch", none: "" }[mode] || "";
    return { data: d, after: (fresh) => { virtualTokens(d, mode, !ids); if (fresh && turnArg != null) goToTurn(+turnArg); }, html: `<h1>Attempt ${esc(d.attempt)} ${verdict(d)}</h1>
    <p>group ${link(hGroup(run, d.group), d.group)} · task ${link(hTask(run, d.task), d.task)} · slot ${v("slot", d.slot)}${d.retry_of ? " · retry of " + link(hAttempt(run, d.retry_of), d.retry_of) : ""} · engine ${esc(d.engine)} · vm ${esc(d.vm)} (fork ${d.fork_ms} ms) · ${esc(d.outcome)}
    · ${d.prev_attempt ? link(RL.nav.prev, "← previous attempt") : ""} ${d.next_attempt ? link(RL.nav.next, "next attempt →") : ""} <span class="muted">(n / p; j / k turns)</span>${query ? ` · <span class="hlnote">marking “${esc(query)}” · ${link(hSearch(run, query), "back to the search")}</span>` : ""}</p>
    ${d.task_prompt || d.task_prompt_cut ? `<details class="prompt" data-prompt><summary>task prompt</summary><div class="turn">${cutText(d.task_prompt, d.task_prompt_cut, "task_prompt_cut", query)}</div></details>` : ""}
    <div class="cards">${card("turns", "turns", d.turns)}${card("completion tokens", "completion_tokens", d.completion_tokens)}${card("reward", "reward", d.reward)}${card("advantage", "advantage", d.advantage)}${card("score", "score", d.score)}${card("bonus", "bonus", d.bonus)}${card("batch", "batch", d.batch || null, d.batch ? "step " + d.batch : d.drop_reason || "–")}${card("gradient step", "gradient_step", d.gradient ? d.gradient.step : null)}</div>
    <form class="filters" data-overlay>overlay: ${Object.entries(overlays).map(([m, label]) => `<label><input type="radio" name="overlay" value="${m}"${m === mode ? " checked" : ""}> ${label}</label>`).join(" ")}
      <span class="muted">${esc(legend)}</span>
      ${d.vocabulary ? ` · tokens: <label><input type="radio" name="tokens" value="pieces"${ids ? "" : " checked"}> text</label> <label><input type="radio" name="tokens" value="ids"${ids ? " checked" : ""}> ids</label> <span class="muted" data-k="vocabulary" data-v="${esc(d.vocabulary.model)}">decoded with ${esc(d.vocabulary.model)}'s vocabulary${d.vocabulary.complete ? "" : " (not every chunk has arrived)"}</span>` : ""}</form>
    ${turns}` };
  },

  async search(q, run) {
    const query = q.get("q") || "";
    setCrumbs([["#/", "runs"], [hRun(run), run], [hSearch(run, query), "search"]]);
    $("#searchq").value = query;
    if (bundle) return { data: {}, html: `<h1>Search</h1><p class="muted">a static bundle cannot search: open the run from the ledger's /ui/</p>` };
    if (!query.trim()) return { data: {}, html: `<h1>Search</h1><p class="muted">type what to look for in the search field above (/): turn text, tool input and output of every attempt, any case</p>` };
    const key = run + "\n" + query + "\n" + (q.get("limit") || "");
    if (searchState.key !== key) {
      const page = await get(runBase(run, "search"), { q: query, ...(q.get("limit") ? { limit: q.get("limit") } : {}) });
      searchState = { key, ...page, hits: page.hits };
    }
    const d = searchState;
    const where = (h) => (h.field === "text" ? "turn text" : `${h.tool} call ${h.call} ${h.field === "tool_input" ? "input" : "output"}`);
    const rows = d.hits.map((h, i) => `<tr class="click" data-href="${esc(hTurn(run, h.attempt, h.turn) + "?hl=" + enc(query))}" data-row="${i}">
      <td>${link(hAttempt(run, h.attempt), h.attempt)}</td><td class="num">${link(hTurn(run, h.attempt, h.turn) + "?hl=" + enc(query), String(h.turn))}</td><td>${esc(where(h))}</td><td class="num">${h.matches}</td>
      <td class="snip">${h.before.length >= 60 ? "…" : ""}${esc(h.before)}<mark>${esc(h.match)}</mark>${esc(h.after)}${h.after.length >= 60 ? "…" : ""}</td></tr>`).join("");
    const status = d.next ? `${d.hits.length} hits in the first ${d.attempts_searched} of ${d.attempts} attempts${d.stopped === "bytes" ? " (each request reads a bounded amount of text)" : ""}` : `${d.hits.length} hits in all ${d.attempts} attempts`;
    return { data: { key, n: d.hits.length, next: d.next }, after: bindMore, html: `<h1>Search “${esc(query)}”</h1>
    <p class="muted" data-k="hits" data-v="${d.hits.length}">${status}</p>
    <table><thead><tr><th>attempt</th><th class="num">turn</th><th>where</th><th class="num">matches</th><th>first match</th></tr></thead><tbody>${rows}</tbody></table>
    ${d.next ? `<p><button data-more-hits>search further</button></p>` : ""}${d.hits.length ? "" : '<p class="muted">no match</p>'}` };
  },

  async compare(q) {
    const ids = (q.get("runs") || "").split(",").filter(Boolean);
    if (ids.length < 2 || ids.length > 4) throw new HTTPError(400, { error: { message: `compare takes 2 to 4 runs, got ${ids.length}: tick them on the runs list` } });
    const views = await Promise.all(ids.map((r) => get(runBase(r))));
    setCrumbs([["#/", "runs"], [location.hash, "compare " + ids.length + " runs"]]);
    const most = Math.max(0, ...views.map((d) => d.steps.length ? d.steps[d.steps.length - 1].step : 0));
    const steps = Array.from({ length: most }, (_, i) => i + 1);
    const runs = views.map((d, i) => ({ name: ids[i], steps: d.steps }));
    const per = (f) => runs.map((r, i) => { const at = new Map(r.steps.map((st) => [st.step, st])); return { name: r.name, color: COLORS[i], values: steps.map((s) => (at.has(s) ? f(at.get(s)) : null)) }; });
    const last = (d, f) => (d.steps.length ? f(d.steps[d.steps.length - 1]) : null);
    const charts = [
      chart("pass rate", steps, per((s) => s.pass_rate), { pct: true, id: "pass_rate" }),
      ...trendCharts(steps, runs),
      chart("masked-token share", steps, per((s) => s.masked_token_fraction), { pct: true, id: "masked" }),
    ];
    return { data: views, html: `<h1>Compare ${ids.length} runs</h1>
    <table><thead><tr><th>run</th><th>status</th><th class="num">steps</th><th class="num">last pass rate</th><th class="num">last mean reward</th><th class="num">last loss</th><th class="num">facts</th></tr></thead><tbody>
    ${views.map((d, i) => `<tr class="click" data-href="${esc(hRun(ids[i]))}" data-row="${esc(ids[i])}"><td><i class="swatch" style="background:${COLORS[i]}"></i>${link(hRun(ids[i]), ids[i])}</td><td>${esc(d.status)}</td><td class="num">${v("steps-" + ids[i], d.steps.length)}</td>
      <td class="num">${pct(last(d, (s) => s.pass_rate))}</td><td class="num">${num(last(d, (s) => s.mean_reward))}</td><td class="num">${num(last(d, (s) => (s.trained ? s.loss : null)), 4)}</td><td class="num">${d.facts}</td></tr>`).join("")}</tbody></table>
    <div class="grid">${charts.join("")}</div>` };
  },

  async attempts(q, run) {
    // The list comes in pages (the server bounds each); filters and sorts
    // apply to the page shown.
    const cursor = q.get("page") || "";
    const d = await get(runBase(run, "attempts"), cursor && !bundle ? { cursor } : undefined);
    setCrumbs([["#/", "runs"], [hRun(run), run], [hRun(run) + "/attempts", "attempts"]]);
    const first = Number(cursor || 0) + 1;
    const pages = d.next || cursor ? `<p class="muted" data-k="page" data-v="${first}">attempts ${first}–${first + d.attempts.length - 1} of ${d.total} in the order started${cursor ? " · " + link(hRun(run) + "/attempts", "first page") : ""}${d.next ? " · " + link(hRun(run) + "/attempts?page=" + enc(d.next), "next page") : ""}</p>` : "";
    return { data: d, html: `<h1>Attempts of ${esc(run)}</h1>${pages}${filterBar(ATTEMPT_FILTERS(d.attempts), q)}${attemptsTable(run, d.attempts, q)}` };
  },

  async tasks(q, run) {
    const cursor = q.get("page") || "";
    const d = await get(runBase(run, "tasks"), cursor && !bundle ? { cursor } : undefined);
    setCrumbs([["#/", "runs"], [hRun(run), run], [hRun(run) + "/tasks", "tasks"]]);
    const rows = d.tasks.filter((t) => (!q.get("q") || t.task.includes(q.get("q"))) && (!q.get("decision") || t.decision === q.get("decision")));
    return { data: d, html: `<h1>Tasks of ${esc(run)}</h1>${filterBar([{ name: "q", label: "search", ph: "task id" }, { name: "decision", label: "admission", options: ["admitted", "rejected", "pending"] }], q)}
    <div class="muted" data-k="shown" data-v="${rows.length}">${rows.length} of ${d.tasks.length} tasks${d.next ? " · " + link(hRun(run) + "/tasks?page=" + enc(d.next), "next page") : ""}${cursor ? " · " + link(hRun(run) + "/tasks", "first page") : ""}</div>
    <table><thead><tr><th>task</th><th>kind</th><th class="num">tier</th><th>decision</th><th class="num">probes</th><th class="num">passes</th><th class="num">probe pass rate</th><th class="num">groups</th><th class="num">attempts</th><th class="num">solved</th></tr></thead><tbody>
    ${rows.map((t) => `<tr class="click" data-href="${esc(hTask(run, t.task))}" data-row="${esc(t.task)}"><td>${link(hTask(run, t.task), t.task)}</td><td>${esc(t.kind)}</td><td class="num">${t.tier}</td><td>${esc(t.decision)}</td><td class="num">${t.probes}</td><td class="num">${t.passes}</td><td class="num">${pct(t.pass_rate)}</td><td class="num">${t.groups}</td><td class="num">${t.attempts}</td><td class="num">${t.solved}</td></tr>`).join("")}</tbody></table>` };
  },

  async task(q, run, id) {
    const cursor = q.get("page") || "";
    const d = await get(runBase(run, "tasks", id), cursor && !bundle ? { cursor } : undefined);
    setCrumbs([["#/", "runs"], [hRun(run), run], [hRun(run) + "/tasks", "tasks"], [hTask(run, id), id]]);
    return { data: d, html: `<h1>Task ${esc(d.task)} <span class="pill">${v("decision", d.decision, d.decision)}</span></h1>
    <p>${esc(d.kind)} · tier ${d.tier} · source ${esc(d.source)} · registered at fact ${d.registered_at.seq} · gates ${d.gates.map((g) => esc(g.name) + (g.passed ? " ✓" : " ✗")).join(", ") || "–"}</p>
    <div class="cards">${card("probes", "probes", d.probes)}${card("passes", "passes", d.passes)}${card("probe pass rate", "pass_rate", d.pass_rate, pct(d.pass_rate))}${card("decided at fact", "decided_at", d.decided_at ? d.decided_at.seq : null, d.decided_at ? String(d.decided_at.seq) : "pending")}${card("attempts", "attempts", d.attempts)}${card("solved", "solved", d.solved)}</div>
    <details class="audit"><summary>log positions, for auditors</summary>registered by fact ${d.registered_at.seq} (partition ${d.registered_at.partition}, offset ${d.registered_at.offset})${d.decided_at ? ` · decision ${d.decision_seq} caused by fact ${d.decided_at.seq} (partition ${d.decided_at.partition}, offset ${d.decided_at.offset})` : ""}</details>
    ${d.prompt || d.prompt_cut ? `<div class="turn">${cutText(d.prompt, d.prompt_cut, "prompt_cut")}</div>` : ""}
    <h2>Groups</h2>${d.groups_next || cursor ? `<p class="muted" data-k="group-page">groups ${Number(cursor || 0) + 1}–${Number(cursor || 0) + d.group_list.length} of ${d.groups}${cursor ? " · " + link(hTask(run, id), "first page") : ""}${d.groups_next ? " · " + link(hTask(run, id) + "?page=" + enc(d.groups_next), "next page") : ""}</p>` : ""}<table><thead><tr><th>group</th><th>purpose</th><th>state</th><th class="num">attempts</th><th class="num">passed</th><th>batch</th></tr></thead><tbody>
    ${d.group_list.map((g) => `<tr class="click" data-href="${esc(hGroup(run, g.group))}" data-row="${esc(g.group)}"><td>${link(hGroup(run, g.group), g.group)}</td><td>${esc(g.purpose)}</td><td>${esc(g.state)}${g.dropped ? ": " + esc(g.dropped) : ""}</td><td class="num">${g.attempts.length}</td><td class="num">${g.attempts.filter((a) => a.passed).length}</td><td>${g.batch ? link(hStep(run, g.batch), "batch " + g.batch) : "–"}</td></tr>`).join("")}</tbody></table>` };
  },
};

// ---- per-token overlays, rendered only for turns near the viewport ----
let observer = null;
function tokenColor(mode, t, i, trained, d) {
  if (mode === "mask") return trained == null ? "#e5e7eb" : trained ? "#bbf7d0" : "#fde68a";
  if (mode === "logprob") { const p = Math.exp(t.logprobs[i] ?? 0); const l = Math.round(55 + 45 * p); return `hsl(220,80%,${l}%)`; }
  if (mode === "version") {
    const seg = segAt(t.segments, i);
    if (!seg || !t.judged) return "#e5e7eb";
    if (seg.staleness > d.config_max_staleness) return "#fca5a5";
    return `hsl(${140 - 20 * seg.staleness},70%,80%)`;
  }
  if (mode === "advantage") {
    if (!trained || d.advantage == null) return "#e5e7eb";
    const l = Math.round(92 - 30 * Math.min(1, Math.abs(d.advantage)));
    return d.advantage >= 0 ? `hsl(140,70%,${l}%)` : `hsl(0,80%,${l}%)`;
  }
  return "transparent";
}
// segBar draws a turn whose token ids were not inlined: its completion as
// a bar, one piece per version segment, coloured as the loss mask.
function segBar(t) {
  const n = t.completion_tokens || 1;
  const parts = t.segments.map((s, i) => {
    const end = i + 1 < t.segments.length ? t.segments[i + 1].start : n;
    const cls = !t.judged ? "" : s.trained ? "trained" : "masked";
    return `<i class="${cls}" style="flex:${Math.max(end - s.start, 1)}" title="tokens ${s.start}–${end - 1}: ${policy(s, t.judged)}${t.judged && s.trained ? ", trains" : ""}"></i>`;
  }).join("");
  return `<div class="segbar" data-segbar>${parts}</div><div class="muted">${t.completion_tokens} completion tokens (ids not inlined)</div>`;
}
function segAt(segs, i) { let s = segs[0]; for (const x of segs) { if (x.start <= i) s = x; else break; } return s; }
// piece is a token's piece as the grid shows it: its text, with a line
// break and a tab made visible.
const piece = (p) => (p === "" ? "∅" : p.replace(/\n/g, "↵").replace(/\t/g, "→"));
function fillTurn(el, d, mode, decoded) {
  const t = d.turn_list[Number(el.dataset.toks)];
  const pieces = decoded ? d.vocabulary.pieces : null;
  const want = mode + (pieces ? "/text" : "/ids");
  if (!t.token_ids.length || el.dataset.filled === want) return;
  const cap = Number(el.dataset.cap || 2000);
  const n = Math.min(t.token_ids.length, cap);
  const out = [];
  let seg = t.segments[0], si = 0;
  for (let i = 0; i < n; i++) {
    while (si + 1 < t.segments.length && t.segments[si + 1].start <= i) seg = t.segments[++si];
    const trained = seg && t.judged ? seg.trained : null;
    const p = pieces ? pieces[t.token_ids[i]] : undefined;
    out.push(`<span style="background:${tokenColor(mode, t, i, trained, d)}"${p === undefined ? "" : ' class="pc"'}>${p === undefined ? t.token_ids[i] : esc(piece(p))}</span>`);
  }
  if (n < t.token_ids.length) out.push(`<button data-more>show ${t.token_ids.length - n} more tokens</button>`);
  el.innerHTML = out.join("");
  el.dataset.filled = want;
  el.dataset.decoded = pieces ? "1" : "";
  el.onmouseover = (e) => {
    if (e.target.tagName !== "SPAN" || e.target.title) return;
    const i = Array.prototype.indexOf.call(el.children, e.target);
    const sg = segAt(t.segments, i);
    const p = d.vocabulary ? d.vocabulary.pieces[t.token_ids[i]] : undefined;
    e.target.title = `#${i} id ${t.token_ids[i]}${p === undefined ? "" : " " + JSON.stringify(p)} · logprob ${t.logprobs[i] ?? "–"} · policy version ${sg ? sg.policy_version : "?"}` +
      (t.judged && sg ? ` · ${sg.staleness} updates behind · loss mask ${sg.trained ? 1 : 0}` : " · not judged by a batch yet");
  };
  el.style.minHeight = "";
  const more = $("[data-more]", el);
  if (more) more.onclick = () => { el.dataset.cap = String(cap + 5000); el.dataset.filled = ""; fillTurn(el, d, mode, decoded); };
}
// goToTurn scrolls to turn n and marks it (a deep link to a turn, or j/k).
function goToTurn(n) {
  const items = navItems();
  const i = items.findIndex((el) => el.dataset.turnN === String(n));
  if (i < 0) return;
  selected = i;
  items.forEach((el, j) => el.classList.toggle("sel", j === i));
  items[i].classList.add("target");
  items[i].scrollIntoView({ block: "start" });
}
function virtualTokens(d, mode, decoded) {
  if (observer) observer.disconnect();
  const els = [...document.querySelectorAll("[data-toks]")];
  const visible = els.filter((el) => { const r = el.getBoundingClientRect(); return r.bottom >= -600 && r.top <= innerHeight + 600; });
  visible.forEach((el) => fillTurn(el, d, mode, decoded));
  // Turns entering the viewport (with a margin) get their token spans;
  // turns leaving it give them up, keeping their height, so the page never
  // holds more spans than a few screens show.
  observer = new IntersectionObserver((entries) => entries.forEach((e) => {
    const el = e.target;
    if (e.isIntersecting) fillTurn(el, d, mode, decoded);
    else if (el.dataset.filled) { el.style.minHeight = el.offsetHeight + "px"; el.textContent = ""; el.dataset.filled = ""; }
  }), { rootMargin: "600px" });
  els.forEach((el) => observer.observe(el));
  document.querySelectorAll("[data-overlay] input").forEach((r) => r.addEventListener("change", () => {
    const [path] = location.hash.split("?");
    const q = new URLSearchParams(location.hash.split("?")[1] || "");
    q.set(r.name, r.value);
    history.replaceState(null, "", path + "?" + q);
    render(true);
  }));
}

// ---- routing, rendering, live updates ----
function route() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const q = new URLSearchParams(query || "");
  const p = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (p[0] === "compare") return ["compare", q, []];
  if (p[0] !== "runs" || p.length === 1) return ["runs", q, []];
  const run = p[1];
  if (p.length === 2) return ["run", q, [run]];
  const kind = p[2], rest = p.slice(3).join("/");
  if (kind === "search" && p.length === 3) return ["search", q, [run]];
  // A turn's deep link: #/runs/R/attempts/A/turns/N.
  if (kind === "attempts" && p.length >= 6 && p[p.length - 2] === "turns" && /^\d+$/.test(p[p.length - 1])) return ["attempt", q, [run, p.slice(3, -2).join("/"), p[p.length - 1]]];
  const single = { steps: "step", groups: "group", attempts: "attempt", tasks: "task" }[kind];
  if (!single) return ["notfound", q, [path]];
  if (!rest) return [kind === "attempts" || kind === "tasks" ? kind : "notfound", q, [run]];
  return [single, q, [run, rest]];
}

let current = { key: "", text: "" };
// keptFields notes the values of the view's form fields and which has the
// focus (with its selection); restoreFields puts them back after a redraw.
function keptFields(root) {
  const fields = [...root.querySelectorAll("form input[name], form select[name]")];
  if (!fields.length) return null;
  const a = document.activeElement;
  return {
    values: fields.filter((f) => f.type !== "radio").map((f) => [f.name, f.value]),
    focus: a && root.contains(a) && a.name ? a.name : "",
    sel: a && a.selectionStart != null ? [a.selectionStart, a.selectionEnd] : null,
  };
}
function restoreFields(root, kept) {
  for (const [name, value] of kept.values) {
    const f = root.querySelector(`form [name="${CSS.escape(name)}"]`);
    if (f && f.type !== "radio") f.value = value;
  }
  if (!kept.focus) return;
  const f = root.querySelector(`form [name="${CSS.escape(kept.focus)}"]`);
  if (!f) return;
  f.focus({ preventScroll: true });
  if (kept.sel && f.setSelectionRange) try { f.setSelectionRange(kept.sel[0], kept.sel[1]); } catch (e) { /* not a text field */ }
}
let gen = 0;
async function render(force) {
  RL.fetchMs = 0;
  const [name, q, args] = route();
  const key = location.hash;
  const my = ++gen;
  const t0 = performance.now();
  const main = $("#main");
  if (!views[name]) { main.innerHTML = `<p class="err">no such view: ${esc(args[0])}</p>`; return; }
  // The search field searches the run the view is of.
  RL.run = name !== "runs" && name !== "compare" ? args[0] : "";
  $("#searchform").hidden = !RL.run || !!bundle;
  let out;
  RL.nav = {};
  try {
    out = await views[name](q, ...args);
  } catch (e) {
    if (my !== gen) return;
    if (e.status === 401 && !bundle) { $("#tokenform").hidden = false; }
    main.innerHTML = `<div class="err" data-error="${e.status || 0}">${esc(e.message)}</div>`;
    document.body.dataset.view = name;
    document.body.dataset.ready = "error";
    return;
  }
  if (my !== gen) return;
  const text = JSON.stringify(out.data);
  if (!force && key === current.key && text === current.text) return; // nothing new
  const scroll = key === current.key ? scrollY : 0;
  // A redraw of the same view (a refresh, or a filter applied) keeps what
  // the user is typing in its form fields, and their focus.
  const fresh = key.split("?")[0] !== current.key.split("?")[0];
  const typing = fresh ? null : keptFields(main);
  current = { key, text };
  main.innerHTML = out.html;
  if (typing) restoreFields(main, typing);
  bindFilters(main);
  bindSort(main);
  main.querySelectorAll("tr.click").forEach((tr) => tr.addEventListener("click", (e) => { if (e.target.tagName !== "A" && e.target.tagName !== "INPUT") location.hash = tr.dataset.href; }));
  if (fresh) selected = -1;
  else if (selected >= 0) select(selected, { quiet: true });
  main.querySelectorAll("svg .pt[data-step]").forEach((el) => el.addEventListener("click", () => { location.hash = hStep(args[0], el.dataset.step); }));
  scrollTo(0, scroll);
  const first = performance.now() - t0;
  if (out.after) out.after(fresh);
  requestAnimationFrame(() => {
    RL.timings = { view: name, fetch_ms: RL.fetchMs || 0, first_ms: first, full_ms: performance.now() - t0 };
    document.body.dataset.view = name;
    document.body.dataset.ready = String(++RL.renders);
    document.body.dataset.facts = out.data && out.data.facts != null ? out.data.facts : "";
  });
}
RL.renders = 0;

let pollTimer = null;
function poll() {
  clearTimeout(pollTimer);
  if (bundle) { $("#live").textContent = "static bundle of " + bundle.run; return; }
  pollTimer = setTimeout(async () => { if (!document.hidden) await render(false).catch(() => {}); poll(); }, POLL_MS);
  $("#live").className = "on";
  $("#live").textContent = "refreshing every " + POLL_MS / 1000 + " s";
}

$("#tokenform").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("rl-token", $("#token").value.trim());
  $("#tokenform").hidden = true;
  render(true);
});
addEventListener("hashchange", () => render(true));
$("#searchform").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#searchq").value;
  if (RL.run && text.trim()) location.hash = hSearch(RL.run, text);
});
$("#helpbtn").addEventListener("click", () => toggleHelp());
$("#help").innerHTML = `<h2>Keys</h2><table>${HELP.map(([k, w]) => `<tr><td><kbd>${esc(k)}</kbd></td><td>${esc(w)}</td></tr>`).join("")}</table><p class="muted">Esc closes</p>`;
if (bundle && !location.hash) location.hash = hRun(bundle.run);
render(true).then(poll);
