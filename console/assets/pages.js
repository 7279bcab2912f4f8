// Policy lab, quotas, runs and health. Each page calls only the public API
// with the signed-in token.

import { api, h, clear, badge, bar, jsonTree, lineDiff, parseJSON, errorText, fmt, egressTable, toolCallsTable } from "./dom.js";
import { request as playgroundRequest } from "./playground.js";
import { artifactsView, fmtBytes } from "./artifacts.js";

const $ = (id) => document.getElementById(id);

// ---- Policy lab -----------------------------------------------------------

export function initPolicy(me) {
  $("pl-tenant").value = me.tenant;
  $("pl-request").value = JSON.stringify({ source: "def run(args, context):\n    return {\"ok\": True}\n", network_access: "none" }, null, 2);
  $("pl-from-playground").addEventListener("click", () => {
    try { $("pl-request").value = JSON.stringify(playgroundRequest(), null, 2); $("pl-error").textContent = ""; }
    catch (e) { $("pl-error").textContent = e.message; }
  });
  $("pl-form").addEventListener("submit", (e) => { e.preventDefault(); evaluate(); });
}

const roleList = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);

async function evaluate() {
  const out = $("pl-out");
  $("pl-error").textContent = "";
  let req;
  try {
    req = parseJSON("request", $("pl-request").value);
    if (!req || typeof req !== "object") throw new Error("request must be a JSON object (an execute request body)");
  } catch (e) { $("pl-error").textContent = e.message; return; }
  const a = { tenant_id: $("pl-tenant").value.trim(), roles: roleList($("pl-roles").value), request: req };
  if (!a.roles.length) delete a.roles;
  const tb = $("pl-tenant-b").value.trim(), rb = $("pl-roles-b").value.trim();
  const b = tb || rb ? { ...a, tenant_id: tb || a.tenant_id, roles: rb ? roleList(rb) : a.roles } : null;
  clear(out, h("p", { class: "muted" }, "Evaluating…"));
  const [ra, rbRes] = await Promise.all([api("POST", "/v1/admin/policy/evaluate", a), b ? api("POST", "/v1/admin/policy/evaluate", b) : null]);
  const kids = [decisionView(ra, "A: " + a.tenant_id + " as " + (a.roles || ["executor"]).join(","), "pl-a")];
  if (b) {
    kids.push(decisionView(rbRes, "B: " + b.tenant_id + " as " + (b.roles || ["executor"]).join(","), "pl-b"));
    if (ra.ok && rbRes.ok) {
      const strip = (r) => { const d = structuredClone(r.body); delete d.decision.id; return JSON.stringify(d, null, 2); };
      const diff = lineDiff(strip(ra), strip(rbRes));
      const changed = diff.filter(([k]) => k !== "same").length;
      kids.push(h("section", { "aria-label": "Differences" }, h("h2", {}, "Diff A → B (" + changed + " changed lines; decision ids left out)"),
        h("div", { class: "diff", id: "pl-diff", tabindex: 0 }, diff.map(([k, text]) => h("span", { class: k }, text)))));
    }
  }
  clear(out, kids);
}

function decisionView(r, title, id) {
  if (!r.ok) return h("section", { id }, h("h2", {}, title), badge("HTTP " + r.status, "error"), h("p", { class: "error" }, errorText(r.body, r.status)));
  const d = r.body.decision;
  return h("section", { id, "aria-label": title }, h("h2", {}, title),
    h("div", { class: "row" }, badge(d.allow ? "allow" : "deny", d.allow ? "ok" : "error"),
      h("span", { class: "muted small" }, "network " + d.network_access + " · decision " + d.id)),
    d.reasons && d.reasons.length ? [h("h3", {}, "Deny reasons"), h("ul", { class: "reasons" }, d.reasons.map((x) => h("li", {}, x)))] : null,
    h("h3", {}, "Decision"), jsonTree(d, 1),
    h("h3", {}, "Input document (exactly what the policy saw)"),
    h("pre", { class: "out", id: id + "-input", tabindex: 0 }, JSON.stringify(r.body.input, null, 2)));
}

// ---- Quotas ---------------------------------------------------------------

const QUOTA_FIELDS = [
  ["rate_per_minute", "rate / minute", 10_000_000],
  ["burst", "burst", 1_000_000],
  ["concurrency", "concurrency", 1_000_000],
  ["daily_cpu_seconds", "daily CPU seconds", 1_000_000_000],
  ["max_queued", "max queued (gateway role)", 1_000_000],
];

export async function loadQuotas() {
  $("q-error").textContent = "";
  const r = await api("GET", "/v1/admin/tenants");
  if (!r.ok) { $("q-error").textContent = errorText(r.body, r.status); clear($("q-list")); return; }
  const list = $("q-list");
  const cards = r.body.tenants.map((t) => h("section", { class: "pane", id: "q-" + t.id, "aria-label": "tenant " + t.id }));
  clear(list, cards);
  await Promise.all(r.body.tenants.map((t, i) => renderTenant(cards[i], t.id)));
}

async function renderTenant(card, id) {
  const [q, u, runs] = await Promise.all([
    api("GET", "/v1/admin/tenants/" + encodeURIComponent(id) + "/quota"),
    api("GET", "/v1/admin/tenants/" + encodeURIComponent(id) + "/usage"),
    api("GET", "/v1/admin/audit?tenant=" + encodeURIComponent(id) + "&limit=200&since=" + new Date(Date.now() - 864e5).toISOString().replace(/\.\d+Z$/, "Z")),
  ]);
  if (!q.ok || !u.ok) { clear(card, h("h2", {}, id), h("p", { class: "error" }, errorText((q.ok ? u : q).body, (q.ok ? u : q).status))); return; }
  const eff = q.body.effective, us = u.body;
  const rateUsed = eff.rate_per_minute > 0 ? Math.max(0, eff.burst - us.rate.remaining) : 0;
  const form = h("form", { class: "quota-form", novalidate: true },
    h("fieldset", { class: "row" }, h("legend", {}, q.body.override ? "Override (set)" : "Override (none: configured values)"),
      QUOTA_FIELDS.map(([k, label, max]) => h("label", {}, label,
        h("input", { type: "number", min: 0, max, step: 1, name: k, value: eff[k] ?? 0, required: true, inputmode: "numeric" })))),
    h("p", { class: "error", role: "alert" }),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Save override"),
      q.body.override ? h("button", { type: "button", class: "clear-override", onclick: () => clearOverride(card, id) }, "Clear override") : null));
  form.addEventListener("submit", (e) => { e.preventDefault(); saveOverride(card, id, form); });
  clear(card, h("h2", {}, id, " ", q.body.override ? badge("override", "warn") : null),
    bar("rate (burst in use)", rateUsed, eff.rate_per_minute > 0 ? eff.burst : 0, "requests", "q-" + id + "-rate"),
    bar("concurrent runs", us.concurrency.running, us.concurrency.limit, "runs", "q-" + id + "-concurrency"),
    bar("CPU today (used + reserved)", us.budget.used_ms + us.budget.reserved_ms, us.budget.limit_ms, "ms", "q-" + id + "-budget"),
    h("p", { class: "muted small" }, "budget resets " + new Date(us.budget.resets_at).toISOString().replace(".000", "")),
    chart24h(runs), form);
}

// validateQuota returns the quota object of the form, or throws an Error
// naming the field (the API checks again).
export function validateQuota(form) {
  const q = {};
  for (const [k, label, max] of QUOTA_FIELDS) {
    const raw = form.elements[k].value.trim();
    const n = Number(raw);
    if (raw === "" || !Number.isInteger(n) || n < 0 || n > max) throw new Error(label + " must be a whole number from 0 to " + fmt(max));
    q[k] = n;
  }
  if (q.rate_per_minute > 0 && q.burst < 1) throw new Error("burst must be at least 1 when rate / minute is set");
  return q;
}

async function saveOverride(card, id, form) {
  const msg = form.querySelector(".error");
  let body;
  try { body = validateQuota(form); } catch (e) { msg.textContent = e.message; return; }
  const r = await api("PUT", "/v1/admin/tenants/" + encodeURIComponent(id) + "/quota", body);
  if (!r.ok) { msg.textContent = errorText(r.body, r.status); return; }
  await renderTenant(card, id);
}

async function clearOverride(card, id) {
  const r = await api("DELETE", "/v1/admin/tenants/" + encodeURIComponent(id) + "/quota");
  if (!r.ok) { card.querySelector(".error").textContent = errorText(r.body, r.status); return; }
  await renderTenant(card, id);
}

// chart24h draws CPU ms per hour over the last 24 hours from the tenant's
// audit records (at most 200, the API's bound).
function chart24h(runs) {
  if (!runs.ok) return h("p", { class: "muted small" }, "No 24-hour chart: " + errorText(runs.body, runs.status));
  const now = Date.now(), buckets = new Array(24).fill(0);
  let count = 0;
  for (const rec of runs.body.records) {
    const age = (now - Date.parse(rec.time)) / 36e5;
    if (age < 0 || age >= 24) continue;
    buckets[23 - Math.floor(age)] += rec.usage.cpu_ms || 0;
    count++;
  }
  const max = Math.max(1, ...buckets);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 240 90");
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "CPU ms per hour, last 24 hours: " + buckets.join(", "));
  buckets.forEach((v, i) => {
    const hgt = (70 * v) / max;
    const r = document.createElementNS(NS, "rect");
    for (const [k, val] of Object.entries({ x: i * 10 + 1, y: 75 - hgt, width: 8, height: Math.max(hgt, v > 0 ? 1 : 0) })) r.setAttribute(k, val);
    const t = document.createElementNS(NS, "title");
    t.textContent = (23 - i) + "–" + (24 - i) + " h ago: " + v + " ms";
    r.appendChild(t);
    svg.appendChild(r);
  });
  const axis = document.createElementNS(NS, "line");
  for (const [k, val] of Object.entries({ x1: 0, y1: 75.5, x2: 240, y2: 75.5, class: "axis" })) axis.setAttribute(k, val);
  svg.appendChild(axis);
  for (const [x, label] of [[2, "−24 h"], [205, "now"]]) {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", 88); t.textContent = label; svg.appendChild(t);
  }
  return h("figure", { class: "chart-fig" }, svg,
    h("figcaption", { class: "muted small" }, "CPU per hour, last 24 h: " + count + " runs, peak " + fmt(max) + " ms/h" +
      (runs.body.records.length >= 200 ? " (the newest 200 runs)" : "")));
}

// ---- Runs -----------------------------------------------------------------

// Who may read a trace (GET /v1/admin/traces/{id}); other roles are not
// sent to be refused.
const TRACE_ROLES = ["admin", "auditor"];
let readsTraces = false;
let signedIn = { tenant: "", roles: [] };

export function initRuns(me) {
  readsTraces = me.roles.some((r) => TRACE_ROLES.includes(r));
  signedIn = me;
  $("r-form").addEventListener("submit", (e) => { e.preventDefault(); searchRuns(); });
}

export async function searchRuns() {
  const p = new URLSearchParams();
  const add = (k, v) => { if (v) p.set(k, v); };
  add("tenant", $("r-tenant").value.trim());
  add("status", $("r-status").value);
  add("error_type", $("r-type").value.trim());
  add("execution_id", $("r-id").value.trim());
  const hours = $("r-since").value;
  if (hours) add("since", new Date(Date.now() - hours * 36e5).toISOString().replace(/\.\d+Z$/, "Z"));
  add("limit", $("r-limit").value.trim());
  $("r-error").textContent = "";
  const r = await api("GET", "/v1/admin/audit?" + p);
  if (!r.ok) { $("r-error").textContent = errorText(r.body, r.status); clear($("r-results")); return; }
  const res = r.body;
  const rows = res.records.map((rec) => {
    const tr = h("tr", { class: "pick", tabindex: 0, dataset: { id: rec.execution_id } },
      h("td", { class: "mono" }, rec.time.replace("T", " ").replace(/\.\d+Z$/, "Z")),
      h("td", {}, rec.tenant_id),
      h("td", { class: "mono" }, rec.execution_id),
      h("td", {}, badge(rec.outcome.status === "ok" ? "ok" : rec.outcome.error_type || "error", rec.outcome.status === "ok" ? "ok" : "error")),
      h("td", {}, rec.usage.wall_ms + " ms"));
    const open = () => { for (const x of tr.parentElement.children) x.classList.remove("selected"); tr.classList.add("selected"); showRun(rec); };
    tr.addEventListener("click", open);
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
    return tr;
  });
  clear($("r-results"),
    h("p", { class: "muted small" }, res.records.length + (res.records.length === 1 ? " record" : " records") + (res.tenant ? " of " + res.tenant : " of every tenant") +
      " · scanned " + fmt(res.scanned_bytes) + " bytes" + (res.scan_limit_reached ? " (scan limit reached: older records not searched)" : "")),
    rows.length ? h("table", { id: "r-table" }, h("thead", {}, h("tr", {}, ["time", "tenant", "execution id", "outcome", "wall"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows)) : h("p", {}, "No runs match."));
  clear($("r-detail"));
}

function showRun(rec) {
  const d = rec.decision;
  const spans = h("div", { id: "r-spans", "aria-live": "polite" }, h("p", { class: "muted small" }, rec.trace_id ? "Looking for the trace…" : "No trace id was recorded."));
  clear($("r-detail"), h("h2", {}, "Run ", h("code", {}, rec.execution_id)),
    h("dl", { class: "kv" },
      h("dt", {}, "time"), h("dd", {}, rec.time),
      h("dt", {}, "tenant / subject"), h("dd", {}, rec.tenant_id + " / " + rec.subject + " (" + (rec.roles || []).join(", ") + ")"),
      rec.language ? [h("dt", {}, "language"), h("dd", {}, rec.language)] : null,
      h("dt", {}, "outcome"), h("dd", {}, "HTTP " + rec.outcome.http_status + " · " + rec.outcome.status + (rec.outcome.error_type ? " · " + rec.outcome.error_type : "") + (rec.outcome.syscall ? " (" + rec.outcome.syscall + ")" : "")),
      h("dt", {}, "quota"), h("dd", {}, rec.quota.outcome + (rec.quota.kind ? " · " + rec.quota.kind : "")),
      h("dt", {}, "trace id"), h("dd", { id: "r-trace" }, rec.trace_id || "—"),
      h("dt", {}, "source sha256"), h("dd", {}, rec.source_sha256 || "—")),
    h("h3", {}, "Decision"),
    d ? [h("div", { class: "row" }, badge(d.allow ? "allow" : "deny", d.allow ? "ok" : "error"),
      h("span", { class: "muted small" }, d.id + " · network " + d.network_access + (d.egress && d.egress.length ? " · egress " + d.egress.join(", ") : ""))),
    d.reasons && d.reasons.length ? h("ul", { class: "reasons" }, d.reasons.map((x) => h("li", {}, x))) : null,
    jsonTree(d.limits, 1)] : h("p", { class: "muted" }, "refused before policy ran"),
    h("h3", {}, "Usage"),
    h("p", {}, rec.usage.wall_ms + " ms wall · " + rec.usage.cpu_ms + " ms CPU · " + fmt(rec.usage.peak_memory_kb) + " KB peak"),
    d && d.limits ? [bar("wall time", rec.usage.wall_ms, d.limits.timeout_ms, "ms"), bar("CPU", rec.usage.cpu_ms, d.limits.cpu_ms, "ms")] : null,
    rec.tool_calls && rec.tool_calls.length ? [h("h3", {}, "Tool calls"), toolCallsTable(rec.tool_calls, rec.tool_calls_dropped, "r-tool-calls")] : null,
    rec.files && rec.files.length ? [h("h3", {}, "Input files"), filesTable(rec.files, rec.files_dropped)] : null,
    rec.artifacts && rec.artifacts.length || rec.artifacts_refused ? [h("h3", {}, "Artifacts"), artifactsView({
      list: rec.artifacts || [], execID: rec.execution_id, tenant: rec.tenant_id === signedIn.tenant ? "" : rec.tenant_id,
      access: artifactAccess(rec.tenant_id), refused: rec.artifacts_refused || 0, unlisted: rec.artifacts_dropped || 0, id: "r-artifacts" })] : null,
    h("h3", {}, "Egress attempts"),
    rec.egress && rec.egress.length ? egressTable(rec.egress, rec.egress_dropped) : h("p", { class: "muted" }, "none"),
    h("h3", {}, "Trace"), spans,
    rec.source ? [h("h3", {}, "Source (recorded by policy)"), h("pre", { class: "out" }, rec.source)] : null);
  if (rec.trace_id && readsTraces) loadSpans(rec.trace_id, spans);
  else if (rec.trace_id) clear(spans, h("p", { class: "muted small", id: "r-spans-note" }, "The spans of a trace are shown to " + TRACE_ROLES.join(" and ") + " tokens; look up trace " + rec.trace_id + " in your collector."));
}

// artifactAccess is "" when the token may read tenant's artifacts (GET
// /v1/executions/{id}/artifacts/{name}: admin, or executor of that
// tenant), else why it may not; the page then offers neither download nor
// preview (the API would refuse them).
function artifactAccess(tenant) {
  const roles = signedIn.roles;
  if (roles.includes("admin") || (roles.includes("executor") && tenant === signedIn.tenant)) return "";
  return "Downloads and previews are for admin tokens and executor tokens of tenant " + tenant +
    " (GET /v1/executions/{id}/artifacts/{name}); this token has roles [" + roles.join(", ") + "].";
}

// filesTable lists an audit record's input files (path, size, sha256).
function filesTable(list, dropped) {
  return h("div", { class: "scroll-x", id: "r-files" }, h("table", {},
    h("thead", {}, h("tr", {}, ["path", "size", "sha256"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, list.map((f) => h("tr", {}, h("td", { class: "mono" }, f.path), h("td", { class: "nowrap" }, fmtBytes(f.bytes)),
      h("td", { class: "mono nowrap", title: f.sha256 }, String(f.sha256 || "").slice(0, 12)))))),
  dropped ? h("p", { class: "muted small" }, dropped + " more files (counted, not listed)") : null);
}

// ---- Spans ----------------------------------------------------------------

// At most this many spans are drawn (a trace is the gateway's own spans of
// one request, a few dozen; the bound keeps a huge one from stalling the
// page).
const MAX_SPANS = 500;

// loadSpans shows the run's spans when the gateway kept them (GET
// /v1/admin/traces/{id}: only without an OTLP endpoint, for admin and
// auditor); a 404 means they went to the collector.
async function loadSpans(traceID, box) {
  const r = await api("GET", "/v1/admin/traces/" + encodeURIComponent(traceID));
  if (r.ok && r.body && Array.isArray(r.body.spans)) { clear(box, waterfall(r.body)); return; }
  if (r.status === 404) {
    clear(box, h("p", { class: "muted small", id: "r-spans-note" },
      "Traces are exported to your collector: look up trace " + traceID + " there. (This gateway shows a run's spans here only when it keeps them, without an OTLP endpoint.)"));
    return;
  }
  clear(box, h("p", { class: "muted small", id: "r-spans-note" }, "The trace could not be read: " + errorText(r.body, r.status)));
}

// timeMS is an RFC 3339 time in milliseconds since the epoch, keeping the
// fraction below a millisecond (Date.parse drops it).
export function timeMS(s) {
  const m = /^(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$/i.exec(String(s));
  if (!m) return Date.parse(s);
  return Date.parse(m[1] + m[3]) + (m[2] ? Number("0" + m[2]) * 1000 : 0);
}

function statusText(st) {
  if (!st) return "";
  if (typeof st === "string") return st;
  return String(st.code ?? "") + (st.description || st.message ? ": " + (st.description || st.message) : "");
}

// waterfall draws a trace's spans in tree order: each row its name
// (indented by depth), duration, and a bar placed by its start and length
// within the whole trace.
export function waterfall(trace) {
  const all = trace.spans.slice(0, MAX_SPANS).map((s) => ({ ...s, t0: timeMS(s.start), t1: timeMS(s.end) }));
  const byID = new Map(all.map((s) => [s.span_id, s]));
  const kids = new Map();
  const roots = [];
  for (const s of all) {
    if (s.parent_span_id && byID.has(s.parent_span_id) && s.parent_span_id !== s.span_id) {
      if (!kids.has(s.parent_span_id)) kids.set(s.parent_span_id, []);
      kids.get(s.parent_span_id).push(s);
    } else roots.push(s);
  }
  const byStart = (a, b) => a.t0 - b.t0;
  const ordered = [];
  const seen = new Set();
  const walk = (s, depth) => {
    if (seen.has(s.span_id)) return; // a cycle in hostile data
    seen.add(s.span_id);
    ordered.push([s, depth]);
    for (const c of (kids.get(s.span_id) || []).sort(byStart)) walk(c, depth + 1);
  };
  roots.sort(byStart).forEach((s) => walk(s, 0));
  const valid = all.filter((s) => Number.isFinite(s.t0) && Number.isFinite(s.t1));
  const start = Math.min(...valid.map((s) => s.t0)), end = Math.max(...valid.map((s) => s.t1));
  const total = Math.max(end - start, 0.001);
  const rows = ordered.map(([s, depth]) => {
    const off = Number.isFinite(s.t0) ? (100 * (s.t0 - start)) / total : 0;
    const dur = typeof s.duration_ms === "number" ? s.duration_ms : Math.max(0, s.t1 - s.t0);
    const width = Math.min(100 - off, (100 * dur) / total);
    const st = statusText(s.status);
    const failed = /error/i.test(st);
    const fill = h("div", { class: "span-bar" + (failed ? " err" : "") });
    fill.style.left = off.toFixed(3) + "%";
    fill.style.width = Math.max(width, 0.2).toFixed(3) + "%";
    const name = h("div", { class: "span-name" }, String(s.name), failed ? [" ", badge(st, "error")] : null);
    name.style.paddingLeft = Math.min(depth, 12) * 0.9 + "rem";
    const attrs = Object.entries(s.attributes || {});
    return h("div", { class: "span-row", dataset: { span: String(s.name), offset: off.toFixed(3), width: width.toFixed(3), duration: String(dur), depth: String(depth) } },
      name,
      h("div", { class: "span-ms" }, fmtMS(dur)),
      h("div", { class: "span-track", role: "img", "aria-label": s.name + ": starts at " + fmtMS(Number.isFinite(s.t0) ? s.t0 - start : 0) + ", lasts " + fmtMS(dur) }, fill),
      attrs.length ? h("details", { class: "span-attrs" }, h("summary", {}, "attributes (" + attrs.length + ")" + (st && !failed && !/^unset$/i.test(st) ? " · status " + st : "")),
        h("dl", { class: "kv" }, attrs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, typeof v === "string" ? v : JSON.stringify(v))]))) : null);
  });
  return h("div", { class: "waterfall", id: "r-waterfall" },
    h("p", { class: "muted small" }, all.length + " spans · " + fmtMS(total) + " in all" + (trace.spans.length > MAX_SPANS ? " (the first " + MAX_SPANS + " of " + trace.spans.length + ")" : "")),
    rows);
}

function fmtMS(ms) { return ms >= 100 ? Math.round(ms) + " ms" : ms >= 1 ? ms.toFixed(1) + " ms" : ms.toFixed(3) + " ms"; }

// ---- Health ---------------------------------------------------------------

export function initHealth() { $("h-refresh").addEventListener("click", loadHealth); }

export async function loadHealth() {
  const out = $("h-out");
  clear(out, h("p", { class: "muted" }, "Checking (the sandbox check may start a jail)…"));
  const r = await fetch("/readyz");
  let body;
  try { body = await r.json(); } catch { body = { ready: false, checks: [] }; }
  const failedOptional = body.checks.filter((c) => !c.ok && c.optional);
  const summary = body.ready ? (failedOptional.length ? badge("ready, degraded", "warn") : badge("ready", "ok")) : badge("not ready", "error");
  clear(out, h("div", { class: "row", id: "h-summary" }, summary, h("span", { class: "muted small" }, "GET /readyz → HTTP " + r.status)),
    h("div", { id: "h-checks" }, body.checks.map((c) => h("div", { class: "check-row", dataset: { check: c.name } },
      h("span", { class: "name" }, c.name),
      badge(c.ok ? "ok" : c.optional ? "failing (optional)" : "failing", c.ok ? "ok" : c.optional ? "warn" : "error"),
      h("span", { class: "detail" }, c.ok ? (c.age_ms ? "last success " + fmt(c.age_ms) + " ms ago" : "") : c.error || "")))));
}
