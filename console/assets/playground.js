// The playground: edit a tool, run or validate it through POST /v1/execute
// and POST /v1/validate with the signed-in token, and read the envelope.

import { api, h, clear, badge, bar, jsonTree, parseJSON, errorText } from "./dom.js";
import { Editor } from "./editor.js";

const SAMPLE = {
  python: 'async def run(args, context):\n    """The probe: returns {"ok": true}."""\n    context.log("hello from the playground")\n    return {"ok": True}\n',
  javascript: 'export async function run(args, context) {\n  return { ok: true };\n}\n',
};

const $ = (id) => document.getElementById(id);
let editor;

export function initPlayground() {
  editor = new Editor({ textarea: $("pg-source"), code: $("pg-highlight"), gutter: $("pg-gutter"), language: () => $("pg-language").value });
  editor.value = sessionStorage.getItem("execgate.source") || SAMPLE.python;
  $("pg-source").addEventListener("input", () => sessionStorage.setItem("execgate.source", editor.value));
  $("pg-language").addEventListener("change", () => {
    const other = Object.values(SAMPLE);
    if (!editor.value.trim() || other.includes(editor.value)) editor.value = SAMPLE[$("pg-language").value];
    else editor.render();
  });
  $("pg-test").addEventListener("change", () => {
    $("pg-fixtures-label").hidden = !$("pg-test").checked;
    $("pg-network").disabled = $("pg-test").checked;
  });
  $("pg-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("pg-validate").addEventListener("click", validate);
  $("pg-form").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
  });
}

// request builds the execute request from the form; it throws an Error
// naming a field that is not valid.
export function request() {
  const req = { language: $("pg-language").value, source: editor.value, entrypoint: $("pg-entrypoint").value.trim() || "run" };
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
  const variables = parseJSON("variables", $("pg-variables").value);
  if ($("pg-test").checked) {
    req.mode = "test";
    req.fixtures = {};
    if (variables !== undefined) req.fixtures.variables = variables;
    const tools = parseJSON("fixture tool returns", $("pg-fixtures").value);
    if (tools !== undefined) req.fixtures.tools = tools;
  } else {
    req.network_access = $("pg-network").value;
    if (variables !== undefined && Object.keys(variables).length) throw new Error("variables are test-mode fixtures: tick Test mode to send them");
  }
  return req;
}

function busy(on) { for (const id of ["pg-run", "pg-validate"]) $(id).disabled = on; }

async function run() {
  const out = $("pg-out");
  $("pg-form-error").textContent = "";
  let req;
  try { req = request(); } catch (e) { $("pg-form-error").textContent = e.message; return; }
  busy(true);
  editor.markError(0);
  clear(out, h("p", { class: "muted", id: "pg-running" }, "Running…"));
  const started = performance.now();
  try {
    const r = await api("POST", "/v1/execute", req);
    renderEnvelope(out, r, Math.round(performance.now() - started));
  } catch (e) {
    clear(out, h("p", { class: "error" }, "The request failed: " + e.message));
  } finally { busy(false); }
}

async function validate() {
  const out = $("pg-out");
  busy(true);
  editor.markError(0);
  try {
    const r = await api("POST", "/v1/validate", { source: editor.value, entrypoint: $("pg-entrypoint").value.trim() || "run" });
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

const USER_FRAME = /(File "tool\.py", )line (\d+)/;

function renderEnvelope(out, r, clientMS) {
  const env = r.body || {};
  const status = r.headers.get("X-Execution-Status") || env.status || "error";
  const ok = env.status === "ok";
  const kids = [];
  kids.push(h("div", { class: "row", id: "pg-status" },
    badge(ok ? "ok" : "error" + (env.error ? ": " + env.error.type : ""), ok ? "ok" : "error"),
    h("span", { class: "muted small" }, "HTTP " + r.status + " · " + status + " · " + clientMS + " ms round trip")));
  kids.push(h("dl", { class: "kv" },
    h("dt", {}, "execution id"), h("dd", {}, env.execution_id || "—"),
    h("dt", {}, "trace id"), h("dd", {}, env.trace_id || "—"),
    env.decision ? [h("dt", {}, "decision"), h("dd", {}, env.decision.id + " · network " + env.decision.network_access)] : null));

  if (env.error) {
    const e = env.error;
    const errBox = h("section", { id: "pg-error", "aria-label": "Error" }, h("h2", {}, e.type),
      h("p", { class: "error" }, e.message || ""));
    if (e.reasons && e.reasons.length) {
      errBox.appendChild(h("h3", {}, "Policy reasons"));
      errBox.appendChild(h("ul", { class: "reasons", id: "pg-reasons" }, e.reasons.map((x) => h("li", {}, x))));
    }
    let line = e.line || 0;
    if (e.traceback) {
      const tb = h("pre", { class: "out", id: "pg-traceback", tabindex: 0 });
      for (const l of e.traceback.split("\n")) {
        const m = USER_FRAME.exec(l);
        if (m) {
          const n = Number(m[2]);
          line = n; // the innermost user frame wins
          const idx = l.indexOf(m[0]);
          tb.appendChild(h("span", { class: "tb-line" }, l.slice(0, idx) + m[1], lineLink(n), l.slice(idx + m[0].length), "\n"));
        } else {
          tb.appendChild(document.createTextNode(l + "\n"));
        }
      }
      errBox.appendChild(h("h3", {}, "Traceback"));
      errBox.appendChild(tb);
    }
    if (line) {
      editor.markError(line);
      errBox.insertBefore(h("p", {}, "At ", lineLink(line), " of the editor."), errBox.children[2] || null);
    }
    kids.push(errBox);
  }

  if (ok || (env.result !== undefined && env.result !== null)) {
    kids.push(h("h2", {}, "Result"), h("div", { id: "pg-result" }, jsonTree(env.result === undefined ? null : env.result)));
  }
  for (const s of ["stdout", "stderr"]) {
    if (!env[s] && !(env.truncated && env.truncated[s])) continue;
    kids.push(h("h2", {}, s, env.truncated && env.truncated[s] ? [" ", h("span", { class: "trunc" }, "truncated")] : null),
      h("pre", { class: "out", id: "pg-" + s, tabindex: 0 }, env[s], env.truncated && env.truncated[s] ? h("span", { class: "trunc" }, "\n… truncated at the output cap") : null));
  }
  if (env.logs && env.logs.length) {
    kids.push(h("h2", {}, "Logs"), h("pre", { class: "out", id: "pg-logs" }, env.logs.map((l) => "[" + l.level + "] " + l.message + "\n")));
  }
  if (env.decision && env.usage) {
    const lim = env.decision.limits || {};
    kids.push(h("h2", {}, "Usage against the decided limits"), h("div", { id: "pg-usage" },
      bar("wall time", env.usage.wall_ms, lim.timeout_ms, "ms"),
      bar("CPU", env.usage.cpu_ms, lim.cpu_ms, "ms"),
      bar("peak memory", Math.round(env.usage.peak_memory_kb / 1024), lim.memory_mb, "MB")));
  }
  if (env.egress && env.egress.length) {
    kids.push(h("h2", {}, "Egress attempts"), egressTable(env.egress, env.egress_dropped));
  }
  clear(out, kids);
}

export function egressTable(list, dropped) {
  return h("div", { class: "scroll-x" }, h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "host"), h("th", {}, "port"), h("th", {}, "allowed"), h("th", {}, "reason"), h("th", {}, "ip"))),
    h("tbody", {}, list.map((a) => h("tr", {}, h("td", { class: "mono" }, a.host), h("td", {}, a.port),
      h("td", {}, badge(a.allowed ? "allowed" : "denied", a.allowed ? "ok" : "error")), h("td", {}, a.reason || ""), h("td", { class: "mono" }, a.ip || ""))))),
  dropped ? h("p", { class: "muted small" }, dropped + " more attempts were dropped") : null);
}
