// The playground: edit a tool, run it through the async API (POST
// /v1/executions, its output followed live on GET /v1/executions/{id}/events,
// cancel with DELETE) or validate it (POST /v1/validate), all with the
// signed-in token, and read the envelope.

import { api, token, h, clear, badge, bar, jsonTree, parseJSON, errorText, toolCallsTable, egressTable } from "./dom.js";
import { Editor } from "./editor.js";
import { artifactsView, fmtBytes } from "./artifacts.js";

const SAMPLE = {
  python: 'async def run(args, context):\n    """The probe: returns {"ok": true}."""\n    context.log("hello from the playground")\n    return {"ok": True}\n',
  javascript: 'export async function run(args, context) {\n  context.log("hello from the playground");\n  return { ok: true };\n}\n',
  typescript: 'type Args = { name?: string };\n\nexport async function run(args: Args, context: { log(message: string): void }): Promise<{ ok: boolean; greeting: string }> {\n' +
    '  context.log("hello from the playground");\n  return { ok: true, greeting: `hello, ${args.name ?? "world"}` };\n}\n',
};
// Languages that run under Deno: network none only, no packages.
const DENO = new Set(["javascript", "typescript"]);
// The API's bound on requirements and egress.allow.
const MAX_LIST = 64;
// How much live output one stream shows (the envelope has the whole capped
// output): a tool may write gigabytes the page need not hold.
const MAX_LIVE_CHARS = 1 << 20;
// How many notes a run shows (a reader that keeps falling behind gets one
// "dropped" event each time); the rest are counted.
const MAX_NOTES = 20;
// The platform's maxima of input files (limits.files, limits.files_bytes):
// the page holds no more than this. What a tenant may send is the policy's
// to decide; the API refuses more, naming the file (shown with the
// envelope).
const MAX_FILES = 1000;
const MAX_FILES_BYTES = 64 << 20;

const $ = (id) => document.getElementById(id);
let editor;
let running = null; // the run in flight: {id, cancel()} once submitted
// The picked input files: {path (the field), name, size, encoding,
// content}, content as the request sends it.
let files = [];

export function initPlayground(me) {
  editor = new Editor({ textarea: $("pg-source"), code: $("pg-highlight"), gutter: $("pg-gutter"), language: () => $("pg-language").value });
  const lang = sessionStorage.getItem("execgate.language");
  if (lang && SAMPLE[lang]) $("pg-language").value = lang;
  editor.value = sessionStorage.getItem("execgate.source") || SAMPLE[$("pg-language").value];
  $("pg-source").addEventListener("input", () => sessionStorage.setItem("execgate.source", editor.value));
  $("pg-language").addEventListener("change", () => {
    const l = $("pg-language").value;
    sessionStorage.setItem("execgate.language", l);
    if (!editor.value.trim() || Object.values(SAMPLE).includes(editor.value)) {
      editor.value = SAMPLE[l];
      sessionStorage.setItem("execgate.source", editor.value);
    } else editor.render();
    formState();
  });
  for (const id of ["pg-test", "pg-network"]) $(id).addEventListener("change", formState);
  $("pg-runtime").addEventListener("change", () => sessionStorage.setItem("execgate.runtime", $("pg-runtime").value));
  // GET /v1/runtimes needs the executor role, as the playground does.
  if (me && me.roles.includes("executor")) loadRuntimes();
  $("pg-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("pg-validate").addEventListener("click", validate);
  $("pg-files-input").addEventListener("change", pickFiles);
  $("pg-files-clear").addEventListener("click", () => { files = []; renderFiles(); });
  $("pg-cancel").addEventListener("click", () => { if (running && running.cancel) running.cancel(); });
  $("pg-form").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
  });
  formState();
}

// loadRuntimes fills the runtime select from GET /v1/runtimes: the
// runtimes the tenant may use, the default one named. A failure leaves
// "tenant default" alone (the run still gets the tenant's runtime).
async function loadRuntimes() {
  let r;
  try { r = await api("GET", "/v1/runtimes"); } catch { return; }
  if (!r.ok || !r.body || !Array.isArray(r.body.runtimes)) return;
  const sel = $("pg-runtime");
  sel.replaceChildren(h("option", { value: "" }, "default (" + r.body.default + ")"));
  for (const rt of r.body.runtimes) {
    if (!rt.granted) continue;
    sel.appendChild(h("option", { value: rt.name, disabled: !rt.available, title: "Python " + rt.python_version + " · " + rt.distribution },
      rt.name + " (" + rt.python_version + ")"));
  }
  const saved = sessionStorage.getItem("execgate.runtime");
  if (saved && [...sel.options].some((o) => o.value === saved && !o.disabled)) sel.value = saved;
}

// formState shows and enables the inputs that apply: test mode forces
// network none; Deno languages have network none and no packages; egress
// hosts go with network proxy.
function formState() {
  const test = $("pg-test").checked, deno = DENO.has($("pg-language").value);
  $("pg-fixtures-label").hidden = !test;
  $("pg-lang-note").hidden = !deno;
  $("pg-network").disabled = test || deno;
  $("pg-requirements").disabled = deno;
  $("pg-runtime").disabled = deno; // JavaScript and TypeScript choose by language
  $("pg-egress-label").hidden = test || deno || $("pg-network").value !== "proxy";
}

// encodeFile reads a picked file as the request carries it: utf8 when its
// bytes are valid UTF-8 (a byte-order mark kept), else base64.
async function encodeFile(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  try {
    return { encoding: "utf8", content: new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes) };
  } catch {
    let bin = "";
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return { encoding: "base64", content: btoa(bin) };
  }
}

// pickFiles adds the chosen files, each at /workspace/<its name> (the path
// can be edited); a file of the same path is replaced. Picks are added one
// after the other, in the order they were made.
let picking = Promise.resolve();
function pickFiles(e) {
  const picked = [...e.target.files];
  e.target.value = ""; // the same file can be picked again
  picking = picking.then(() => addFiles(picked));
}

async function addFiles(picked) {
  const problems = [];
  for (const f of picked) {
    const rest = files.filter((x) => x.path.value !== f.name);
    const total = rest.reduce((n, x) => n + x.size, 0) + f.size;
    if (rest.length + 1 > MAX_FILES || total > MAX_FILES_BYTES) {
      problems.push("input file " + JSON.stringify(f.name) + " (" + fmtBytes(f.size) + ") was not added: a request carries at most " +
        MAX_FILES + " files of " + fmtBytes(MAX_FILES_BYTES) + " in all (the platform's maxima; the tenant's policy may allow less)");
      continue;
    }
    let enc;
    try { enc = await encodeFile(f); } catch (err) { problems.push("input file " + JSON.stringify(f.name) + " could not be read: " + err.message); continue; }
    const path = h("input", { value: f.name, spellcheck: "false", autocomplete: "off", "aria-label": "path of input file " + f.name, class: "path" });
    path.addEventListener("input", () => { path.removeAttribute("aria-invalid"); path.closest("tr").classList.remove("bad"); });
    files = [...rest, { path, name: f.name, size: f.size, ...enc }];
  }
  $("pg-form-error").textContent = problems.join("\n");
  renderFiles();
}

function filesBytes() { return files.reduce((n, f) => n + f.size, 0); }

function renderFiles() {
  const box = $("pg-files");
  $("pg-files-clear").hidden = !files.length;
  $("pg-files-sum").textContent = files.length ? files.length + (files.length === 1 ? " file, " : " files, ") + fmtBytes(filesBytes()) : "";
  if (!files.length) { clear(box); return; }
  clear(box, h("table", { id: "pg-files-table" },
    h("thead", {}, h("tr", {}, ["path under /workspace", "size", "sent as", ""].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, files.map((f, i) => h("tr", { dataset: { index: String(i), name: f.name } },
      h("td", {}, f.path),
      h("td", { class: "nowrap size" }, fmtBytes(f.size)),
      h("td", {}, f.encoding),
      h("td", {}, h("button", { type: "button", class: "quiet", "aria-label": "remove input file " + f.name,
        onclick: () => { files = files.filter((x) => x !== f); renderFiles(); } }, "Remove")))))));
}

// markFile points at the input file a refusal names ("files[2]…").
function markFile(message) {
  for (const r of document.querySelectorAll("#pg-files-table tr.bad")) {
    r.classList.remove("bad");
    r.querySelector("input.path").removeAttribute("aria-invalid");
  }
  const m = /\bfiles\[(\d+)\]/.exec(message || "");
  const row = m && document.querySelector('#pg-files-table tr[data-index="' + m[1] + '"]');
  if (!row) return;
  row.classList.add("bad");
  row.querySelector("input.path").setAttribute("aria-invalid", "true");
}

// lines splits a one-per-line field into its non-empty trimmed lines,
// throwing an Error naming the field beyond the API's bound.
function lines(field, text) {
  const out = text.split("\n").map((x) => x.trim()).filter(Boolean);
  if (out.length > MAX_LIST) throw new Error(field + " has " + out.length + " lines; at most " + MAX_LIST);
  return out;
}

// request builds the execute request from the form; it throws an Error
// naming a field that is not valid.
export function request() {
  const language = $("pg-language").value, deno = DENO.has(language);
  const req = { language, source: editor.value, entrypoint: $("pg-entrypoint").value.trim() || "run" };
  if (!deno && $("pg-runtime").value) req.runtime = $("pg-runtime").value;
  const args = parseJSON("args", $("pg-args").value);
  if (args !== undefined) req.args = args;
  const limits = {};
  for (const [id, k] of [["pg-timeout", "timeout_ms"], ["pg-cpu", "cpu_ms"], ["pg-memory", "memory_mb"]]) {
    const v = $(id).value.trim();
    if (!v) continue;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(k + " must be a whole number of at least 1");
    limits[k] = n;
  }
  if (Object.keys(limits).length) req.limits = limits;
  if (files.length) {
    req.files = files.map((f) => {
      const o = { path: f.path.value, content: f.content };
      if (f.encoding !== "utf8") o.encoding = f.encoding;
      return o;
    });
  }
  const stdin = $("pg-stdin").value;
  if (stdin) req.stdin = stdin;
  const requirements = lines("requirements", $("pg-requirements").value);
  if (requirements.length) {
    if (deno) throw new Error("requirements are Python packages: " + language + " tools cannot install packages (clear the field)");
    req.requirements = requirements;
  }
  const variables = parseJSON("variables", $("pg-variables").value);
  if ($("pg-test").checked) {
    req.mode = "test";
    req.fixtures = {};
    if (variables !== undefined) req.fixtures.variables = variables;
    const tools = parseJSON("fixture tool returns", $("pg-fixtures").value);
    if (tools !== undefined) req.fixtures.tools = tools;
  } else {
    req.network_access = deno ? "none" : $("pg-network").value;
    if (variables !== undefined && Object.keys(variables).length) throw new Error("variables are test-mode fixtures: tick Test mode to send them");
    if (req.network_access === "proxy") {
      const allow = lines("egress allow", $("pg-egress").value);
      if (allow.length) req.egress = { allow };
    }
  }
  return req;
}

function busy(on) {
  for (const id of ["pg-run", "pg-validate"]) $(id).disabled = on;
  if (!on) { $("pg-cancel").hidden = true; $("pg-cancel").disabled = false; }
}

// The async route is refused (not there, or not the gateway answering):
// the playground then runs through POST /v1/execute and says so.
function routeRefused(r) {
  return r.status === 404 || r.status === 405 || r.status === 501 || (r.body && r.body.error && r.body.error.type === "NotJSON");
}

async function run() {
  if (running) return;
  const out = $("pg-out");
  $("pg-form-error").textContent = "";
  let req;
  try { req = request(); } catch (e) { $("pg-form-error").textContent = e.message; return; }
  busy(true);
  running = {};
  editor.markError(0);
  const live = liveView();
  clear(out, live.el);
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const sub = await api("POST", "/v1/executions", req);
    if (sub.status === 202 && sub.body && sub.body.execution_id) {
      const id = sub.body.execution_id;
      live.submitted(id);
      running = { id, cancel: () => cancel(id, live) };
      $("pg-cancel").hidden = false;
      const end = await follow(id, live);
      renderEnvelope(out, { ...end, clientMS: elapsed(), via: end.via, notes: live.notes });
    } else if (routeRefused(sub)) {
      const why = "POST /v1/executions answered HTTP " + sub.status + (sub.body && sub.body.error ? " (" + errorText(sub.body, sub.status) + ")" : "") +
        ", so this run went through POST /v1/execute: no live output and no cancel.";
      live.note(why, "pg-fallback");
      const r = await api("POST", "/v1/execute", req);
      renderEnvelope(out, { status: r.status, env: r.body, header: r.headers.get("X-Execution-Status"), clientMS: elapsed(), via: "POST /v1/execute", notes: live.notes });
    } else {
      // A refused submission answers with an envelope, as /v1/execute does.
      renderEnvelope(out, { status: sub.status, env: sub.body, header: sub.headers.get("X-Execution-Status"), clientMS: elapsed(), via: "POST /v1/executions (refused)", notes: live.notes });
    }
  } catch (e) {
    clear(out, h("p", { class: "error" }, "The request failed: " + e.message +
      (files.length ? " (it carried " + fmtBytes(filesBytes()) + " of input files: a gateway may close the connection on a body over its server.max_body_bytes without reading it)" : "")));
  } finally {
    running = null;
    busy(false);
  }
}

async function cancel(id, live) {
  $("pg-cancel").disabled = true;
  const r = await api("DELETE", "/v1/executions/" + encodeURIComponent(id));
  live.note(r.status === 202 ? "Cancel requested (DELETE → 202); the run ends as Cancelled." :
    r.status === 200 ? "The run had already finished (DELETE → 200)." : "Cancel refused: " + errorText(r.body, r.status), "pg-cancel-note");
}

// liveView is the output pane while a run goes: its id and state, stdout,
// stderr and log lines as they arrive, and notes (dropped events, the route
// taken). Everything goes in as text.
function liveView() {
  const state = h("span", { id: "pg-live-state" }, "submitting…");
  const idEl = h("code", { id: "pg-live-id" });
  const notes = h("div", { id: "pg-notes" });
  const streams = {};
  let more = 0, moreEl = null;
  const body = h("div", {});
  const el = h("section", { id: "pg-live", "aria-label": "Live output" },
    h("div", { class: "row" }, badge("running", "warn"), h("span", { class: "muted small" }, "execution ", idEl, " · ", state)), notes, body);
  const stream = (name) => {
    if (!streams[name]) {
      const pre = h("pre", { class: "out", id: "pg-live-" + name, tabindex: 0 });
      body.append(h("h2", {}, name + " (live)"), pre);
      streams[name] = { pre, chars: 0, capped: false };
    }
    return streams[name];
  };
  return {
    el, notes,
    submitted(id) { idEl.textContent = id; state.textContent = "queued"; },
    state(s) { state.textContent = s; },
    append(name, text) {
      const s = stream(name);
      if (s.capped) return;
      if (s.chars + text.length > MAX_LIVE_CHARS) {
        text = text.slice(0, MAX_LIVE_CHARS - s.chars);
        s.capped = true;
      }
      s.chars += text.length;
      s.pre.append(text);
      if (s.capped) s.pre.append(h("span", { class: "trunc" }, "\n… the live view stops here; the envelope has the output up to its cap"));
      s.pre.scrollTop = s.pre.scrollHeight;
    },
    note(text, id) {
      // The named notes (route, cancel: a few) are always shown.
      if (id || notes.childNodes.length < MAX_NOTES) { notes.append(h("p", { class: "muted small note", id }, text)); return; }
      if (!moreEl) notes.append(moreEl = h("p", { class: "muted small note" }));
      moreEl.textContent = "… and " + ++more + " more notes";
    },
  };
}

// follow reads the execution's events until its envelope, resuming with
// Last-Event-ID when the stream breaks; when the stream is refused it
// polls GET /v1/executions/{id}. It resolves to {status, env, via}.
async function follow(id, live) {
  const path = "/v1/executions/" + encodeURIComponent(id);
  let last = "";
  for (let attempt = 0; attempt < 4; attempt++) {
    const headers = { Authorization: "Bearer " + token(), Accept: "text/event-stream" };
    if (last) headers["Last-Event-ID"] = last;
    let r;
    try { r = await fetch(path + "/events", { headers }); } catch (e) { live.note("The event stream could not be opened: " + e.message); break; }
    if (r.status === 401) { document.dispatchEvent(new CustomEvent("execgate:unauthenticated", { detail: null })); throw new Error("the token was refused"); }
    if (!r.ok || !r.body) {
      const text = await r.text();
      let msg = "HTTP " + r.status;
      try { msg = errorText(JSON.parse(text), r.status); } catch { /* not JSON: the status says it */ }
      live.note("Live output is not available (GET …/events: " + msg + "); waiting for the result instead.", "pg-poll-note");
      break;
    }
    live.state("running");
    let env = null;
    try {
      for await (const ev of sseEvents(r.body)) {
        if (ev.id) last = ev.id;
        let data;
        try { data = JSON.parse(ev.data); } catch { continue; }
        if (ev.event === "stdout" || ev.event === "stderr") live.append(ev.event, String(data.text ?? ""));
        else if (ev.event === "log") live.append("logs", "[" + data.level + "] " + data.message + "\n");
        else if (ev.event === "dropped") live.note("This page fell behind and missed " + data.events + " events of live output (the run was not slowed; the envelope has the output).");
        else if (ev.event === "envelope") env = data;
      }
    } catch (e) { live.note("The event stream broke: " + e.message); }
    if (env) {
      // The stream's envelope has no HTTP status: the execution's GET has it.
      const g = await api("GET", path);
      return { status: g.ok && g.body.http_status ? g.body.http_status : 0, env, via: "POST /v1/executions + live events" };
    }
    live.note("The event stream ended before the envelope; resuming" + (last ? " after event " + last : "") + ".");
  }
  return poll(path, live);
}

// poll waits for the execution to be done (GET every half second, while
// the run's own limits bound how long that is).
async function poll(path, live) {
  for (;;) {
    const g = await api("GET", path);
    if (!g.ok) return { status: g.status, env: g.body, via: "GET " + path };
    live.state(g.body.status);
    if (g.body.status === "done") return { status: g.body.http_status, env: g.body.envelope, via: "POST /v1/executions + polling" };
    await new Promise((res) => setTimeout(res, 500));
  }
}

// sseEvents parses a Server-Sent Events body into {event, data, id}
// (fetch streaming: EventSource cannot send the Authorization header).
// Lines end with CRLF, LF or CR; a CR at the end of a chunk waits for the
// next one, whose LF may belong to it.
export async function* sseEvents(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "", cr = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      let text = cr + dec.decode(value, { stream: true });
      cr = text.endsWith("\r") ? "\r" : "";
      if (cr) text = text.slice(0, -1);
      buf += text.replace(/\r\n?/g, "\n");
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const ev = { event: "message", data: "", id: "" };
        const data = [];
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const c = line.indexOf(":");
          const k = c < 0 ? line : line.slice(0, c);
          const v = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
          if (k === "event") ev.event = v;
          else if (k === "data") data.push(v);
          else if (k === "id") ev.id = v;
        }
        ev.data = data.join("\n");
        if (data.length) yield ev;
      }
    }
  } finally { reader.releaseLock(); }
}

async function validate() {
  const out = $("pg-out");
  busy(true);
  editor.markError(0);
  try {
    const r = await api("POST", "/v1/validate", { language: $("pg-language").value, source: editor.value, entrypoint: $("pg-entrypoint").value.trim() || "run" });
    if (!r.ok) { clear(out, badge("HTTP " + r.status, "error"), h("p", { class: "error" }, errorText(r.body, r.status))); return; }
    const v = r.body;
    if (v.valid) { clear(out, h("div", { id: "pg-status" }, badge("valid", "ok")), h("p", {}, "The source compiles and defines the entrypoint.")); return; }
    const first = (v.errors || [])[0];
    if (first && first.line) editor.markError(first.line);
    clear(out, h("div", { id: "pg-status" }, badge("invalid", "error")),
      h("ul", { class: "reasons" }, (v.errors || []).map((e) => h("li", {}, lineLink(e.line), " col " + e.col + ": " + e.message))));
  } finally { busy(false); }
}

function lineLink(n) {
  if (!n) return "";
  return h("a", { href: "#playground", class: "line-link", dataset: { line: String(n) }, onclick: (e) => { e.preventDefault(); editor.goto(n); } }, "line " + n);
}

// A traceback's frames of the tool: Python's `File "tool.py", line N`
// (innermost last) and Deno's `tool.js:N:C` / `tool.ts:N:C` (innermost
// first).
const USER_FRAME = /(File "tool\.py", )line (\d+)|(tool\.(?:js|ts):)(\d+)(:\d+)/;

// renderEnvelope shows an envelope for people: {status (HTTP), env,
// header (X-Execution-Status, when there was one), clientMS, via, notes}.
function renderEnvelope(out, { status, env, header, clientMS, via, notes }) {
  env = env || {};
  const ok = env.status === "ok";
  const execStatus = header || (ok ? "ok" : "error" + (env.error ? ":" + env.error.type : ""));
  const kids = [];
  kids.push(h("div", { class: "row", id: "pg-status" },
    badge(ok ? "ok" : "error" + (env.error ? ": " + env.error.type : ""), ok ? "ok" : "error"),
    h("span", { class: "muted small" }, "HTTP " + (status || "—") + " · " + execStatus + " · " + clientMS + " ms round trip · " + via)));
  if (notes && notes.childNodes.length) kids.push(notes);
  const d = env.decision;
  kids.push(h("dl", { class: "kv" },
    h("dt", {}, "execution id"), h("dd", { id: "pg-execution-id" }, env.execution_id || "—"),
    h("dt", {}, "trace id"), h("dd", {}, env.trace_id || "—"),
    env.usage && env.usage.runtime ? [h("dt", {}, "ran on"), h("dd", { id: "pg-ran-on" }, env.usage.runtime + (env.usage.isolation ? " · level " + env.usage.isolation : ""))] : null,
    d ? [h("dt", {}, "decision"), h("dd", { id: "pg-decision" }, d.id + " · network " + d.network_access + (d.isolation ? " · isolation " + d.isolation : "") + (d.runtime ? " · runtime " + d.runtime : "")),
      d.egress && d.egress.allow && d.egress.allow.length ? [h("dt", {}, "egress allowed"), h("dd", { id: "pg-egress-allow" }, d.egress.allow.join(", "))] : null] : null));

  if (env.error) {
    const e = env.error;
    const errBox = h("section", { id: "pg-error", "aria-label": "Error" }, h("h2", {}, e.type),
      h("p", { class: "error" }, e.message || ""));
    if (e.type === "PayloadTooLarge" && /^body:/.test(e.message || "") && files.length) {
      errBox.append(h("p", { class: "muted small", id: "pg-body-hint" }, "The input files travel in the request body (" + fmtBytes(filesBytes()) +
        " picked; those sent as base64 a third more), and the gateway's server.max_body_bytes bounds the body before any policy limit: send fewer or smaller files, or ask the operator to raise it."));
    }
    if (e.reasons && e.reasons.length) {
      errBox.appendChild(h("h3", {}, "Policy reasons"));
      errBox.appendChild(h("ul", { class: "reasons", id: "pg-reasons" }, e.reasons.map((x) => h("li", {}, x))));
    }
    let line = e.line || 0;
    if (e.traceback) {
      const tb = h("pre", { class: "out", id: "pg-traceback", tabindex: 0 });
      const frames = [];
      for (const l of e.traceback.split("\n")) {
        const m = USER_FRAME.exec(l);
        if (m) {
          const n = Number(m[2] || m[4]);
          frames.push({ n, py: !!m[1] });
          const idx = l.indexOf(m[0]);
          tb.appendChild(h("span", { class: "tb-line" }, l.slice(0, idx) + (m[1] || m[3]), lineLink(n), m[5] || "", l.slice(idx + m[0].length), "\n"));
        } else {
          tb.appendChild(document.createTextNode(l + "\n"));
        }
      }
      if (frames.length) line = frames[0].py ? frames[frames.length - 1].n : frames[0].n; // the innermost user frame
      errBox.appendChild(h("h3", {}, "Traceback"));
      errBox.appendChild(tb);
    }
    if (line) {
      editor.markError(line);
      errBox.insertBefore(h("p", {}, "At ", lineLink(line), " of the editor."), errBox.children[2] || null);
    }
    kids.push(errBox);
  }
  markFile(env.error && env.error.message);

  if (ok || (env.result !== undefined && env.result !== null)) {
    kids.push(h("h2", {}, "Result"), h("div", { id: "pg-result" }, jsonTree(env.result === undefined ? null : env.result)));
  }
  for (const s of ["stdout", "stderr"]) {
    if (!env[s] && !(env.truncated && env.truncated[s])) continue;
    kids.push(h("h2", {}, s, env.truncated && env.truncated[s] ? [" ", h("span", { class: "trunc" }, "truncated")] : null),
      h("pre", { class: "out", id: "pg-" + s, tabindex: 0 }, env[s], env.truncated && env.truncated[s] ? h("span", { class: "trunc" }, "\n… truncated at the output cap") : null));
  }
  const tr = env.truncated || {};
  if ((env.artifacts && env.artifacts.length) || tr.artifacts_dropped) {
    kids.push(h("h2", {}, "Artifacts"), artifactsView({ list: env.artifacts || [], execID: env.execution_id, truncated: tr.artifacts || [],
      refused: tr.artifacts_dropped || 0, id: "pg-artifacts" }));
  }
  if (env.logs && env.logs.length) {
    kids.push(h("h2", {}, "Logs"), h("pre", { class: "out", id: "pg-logs" }, env.logs.map((l) => "[" + l.level + "] " + l.message + "\n")));
  }
  if (env.tool_calls && env.tool_calls.length) {
    kids.push(h("h2", {}, "Tool calls"), toolCallsTable(env.tool_calls, env.tool_calls_dropped, "pg-tool-calls"));
  }
  if (d && env.usage) {
    const lim = d.limits || {};
    kids.push(h("h2", {}, "Usage against the decided limits"), h("div", { id: "pg-usage" },
      bar("wall time", env.usage.wall_ms, lim.timeout_ms, "ms"),
      bar("CPU", env.usage.cpu_ms, lim.cpu_ms, "ms"),
      bar("peak memory", Math.round(env.usage.peak_memory_kb / 1024), lim.memory_mb, "MB")));
  }
  if (env.egress && env.egress.length) {
    kids.push(h("h2", {}, "Egress attempts"), egressTable(env.egress, env.egress_dropped, "pg-egress-attempts"));
  }
  clear(out, kids);
}
