// Small DOM and API helpers. Everything that reaches the page from the API
// or from a tool goes in as text (textContent, createTextNode), never as
// markup.

const TOKEN_KEY = "execgate.token";

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
export function setToken(t) { t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY); }

// claims decodes the token's payload for display and for hiding pages the
// roles cannot use. It checks nothing: the API verifies every call.
export function claims(t) {
  const parts = (t || "").split(".");
  if (parts.length !== 3) throw new Error("a JWT has three dot-separated parts");
  const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
  const json = decodeURIComponent(Array.from(atob(b64 + "===".slice((b64.length + 3) % 4)),
    (c) => "%" + c.charCodeAt(0).toString(16).padStart(2, "0")).join(""));
  const c = JSON.parse(json);
  return { tenant: c.tenant_id || "", sub: c.sub || "", roles: Array.isArray(c.roles) ? c.roles : [], exp: c.exp || 0 };
}

// api calls the public API with the signed-in token. It resolves to
// {status, ok, body, headers}; body is the parsed JSON (or null).
export async function api(method, path, body) {
  const opts = { method, headers: { Authorization: "Bearer " + token() } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  let parsed = null;
  const text = await r.text();
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = { status: "error", error: { type: "NotJSON", message: text.slice(0, 500) } }; }
  if (r.status === 401) document.dispatchEvent(new CustomEvent("execgate:unauthenticated", { detail: parsed }));
  return { status: r.status, ok: r.ok, body: parsed, headers: r.headers };
}

// h builds an element: h("div", {class: "x", onclick: fn}, "text", child…).
// Strings become text nodes; attributes are set one by one.
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

export function clear(el, ...kids) { el.replaceChildren(); append(el, kids); return el; }

export function badge(text, kind) { return h("span", { class: "badge " + kind }, text); }

// errorText is "Type: message" of an API error body.
export function errorText(body, status) {
  const e = body && body.error;
  if (e) return (e.type || "Error") + ": " + (e.message || "") + (e.reasons && e.reasons.length ? " — " + e.reasons.join("; ") : "");
  return "HTTP " + status;
}

// bar is a labelled usage bar: value of max (max 0: unlimited).
export function bar(name, value, max, unit, id) {
  const pct = max > 0 ? Math.min(100, (100 * value) / max) : 0;
  const fill = h("div", { class: "fill" + (pct >= 100 ? " full" : pct >= 80 ? " high" : "") });
  fill.style.width = pct.toFixed(2) + "%";
  const limit = max > 0 ? fmt(max) + " " + unit : "unlimited";
  return h("div", { class: "bar", id, dataset: { pct: pct.toFixed(3), value: String(value), max: String(max) } },
    h("div", { class: "label" }, h("span", {}, name), h("span", {}, fmt(value) + " " + unit + " of " + limit)),
    h("div", { class: "track", role: "meter", "aria-label": name, "aria-valuemin": 0, "aria-valuemax": max > 0 ? max : value || 1,
      "aria-valuenow": value, "aria-valuetext": fmt(value) + " " + unit + " of " + limit }, fill));
}

export function fmt(n) { return typeof n === "number" ? n.toLocaleString("en-US") : String(n); }

// jsonTree renders a JSON value as nested <details>, collapsible by mouse
// and keyboard; open to depth `open`.
export function jsonTree(value, open = 2) {
  return h("div", { class: "tree" }, node(null, value, 0, open));
}

function node(key, v, depth, open) {
  const k = key === null ? null : h("span", { class: "key" }, JSON.stringify(key) + ": ");
  if (v !== null && typeof v === "object") {
    const isArr = Array.isArray(v);
    const entries = isArr ? v.map((x, i) => [i, x]) : Object.entries(v);
    const sum = h("summary", {}, k, isArr ? "[" + entries.length + "]" : "{" + entries.length + "}");
    const d = h("details", { open: depth < open }, sum);
    for (const [ck, cv] of entries) d.appendChild(node(isArr ? null : ck, cv, depth + 1, open));
    if (!entries.length) return h("div", { class: "leaf" }, k, isArr ? "[]" : "{}");
    return d;
  }
  const cls = v === null ? "z" : typeof v === "string" ? "s" : typeof v === "number" ? "n" : "b";
  return h("div", { class: "leaf" }, k, h("span", { class: cls }, JSON.stringify(v)));
}

// lineDiff is a line diff of a and b (LCS), for the policy lab.
export function lineDiff(a, b) {
  const x = a.split("\n"), y = b.split("\n");
  const n = x.length, m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { out.push(["same", "  " + x[i]]); i++; j++; }
    else if (j < m && (i >= n || L[i][j + 1] >= L[i + 1][j])) { out.push(["add", "+ " + y[j]]); j++; }
    else { out.push(["del", "- " + x[i]]); i++; }
  }
  return out;
}

// parseJSON parses a field's JSON, throwing an Error naming the field.
export function parseJSON(field, text) {
  if (!text.trim()) return undefined;
  try { return JSON.parse(text); } catch (e) { throw new Error(field + " is not valid JSON: " + e.message); }
}

// egressTable lists egress attempts (an envelope's or an audit record's).
export function egressTable(list, dropped, id) {
  return h("div", { class: "scroll-x", id }, h("table", {},
    h("thead", {}, h("tr", {}, ["host", "port", "allowed", "reason", "ip"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, list.map((a) => h("tr", {}, h("td", { class: "mono" }, a.host), h("td", {}, a.port),
      h("td", {}, badge(a.allowed ? "allowed" : "denied", a.allowed ? "ok" : "error")), h("td", {}, a.reason || ""), h("td", { class: "mono" }, a.ip || ""))))),
  dropped ? h("p", { class: "muted small" }, dropped + " more attempts were dropped") : null);
}

// toolCallsTable lists a run's tool calls through the bridge: an
// envelope's {tool, server, decision_id, ms, outcome}, or an audit
// record's, which may add reason and bytes.
export function toolCallsTable(list, dropped, id) {
  const audit = list.some((c) => c.reason !== undefined || c.bytes_in !== undefined);
  const cols = ["tool", "server", "outcome", "ms", "decision"].concat(audit ? ["reason", "bytes in / out"] : []);
  return h("div", { class: "scroll-x", id }, h("table", {},
    h("thead", {}, h("tr", {}, cols.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, list.map((c) => h("tr", { dataset: { tool: String(c.tool) } },
      h("td", { class: "mono nowrap" }, c.tool), h("td", {}, c.server || "—"),
      h("td", {}, badge(c.outcome, c.outcome === "ok" ? "ok" : "error")),
      h("td", {}, fmt(c.ms)), h("td", { class: "mono" }, c.decision_id || "—"),
      audit ? [h("td", {}, c.reason || ""), h("td", {}, fmt(c.bytes_in ?? 0) + " / " + fmt(c.bytes_out ?? 0))] : null)))),
  dropped ? h("p", { class: "muted small" }, dropped + " more calls were made (counted, not listed)") : null);
}
