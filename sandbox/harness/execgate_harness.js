// execgate JavaScript/TypeScript harness (protocol 1).
//
// Runs as Deno's main module inside the jail, with every Deno permission
// denied but reading /workspace, writing /workspace/out (below), reading
// and writing the run's secrets directory (SECRETS_DIR: this harness writes
// the run's brokered secrets there and revokes the write permission before
// the tool loads; the tool may read them), the network in network modes
// proxy and host, and reading and writing the run's egress socket in mode
// proxy (sandbox/language.go denoFlags starts it), and an import map that
// blocks every file:, node:, npm:, jsr: and remote specifier (a package
// environment's adds its packages' bare names). In network mode proxy it
// relays 127.0.0.1:3128 to the run's egress socket (startEgressRelay).
// Deno cannot open file descriptors beyond 0, 1 and 2 without permissions, so
// this harness frames what it writes on stdout:
//
//	frame = kind (1 byte) | length (4 bytes, big endian) | payload
//	kind 1: bytes the tool wrote to stdout (console.log, Deno.stdout)
//	kind 2: the result envelope (JSON), written once, last
//	kind 3: one tool bridge request (the JSON Python sends on fd 5)
//
// The runner (sandbox/demux.go) splits the stream back into the tool's
// stdout, the envelope and the bridge requests. Every frame is written here,
// with a writer taken before the tool loads; the tool's own writes (console,
// Deno.stdout) only ever become kind-1 payloads. Raw bytes a tool manages to
// write on fd 1 break the framing, which the runner reports like a write on
// Python's result fd: the envelope is a claim of the tool's process either
// way, and the runner takes only tool-level outcomes from it. stderr (fd 2)
// is the tool's, raw.
//
// stdin carries the request as one frame (4-byte big-endian length | JSON)
// and then the bridge's answers, framed the same way; the runner keeps it
// open until the jail is gone (EOF earlier: the bridge has ended). The
// tool's Deno.stdin is the request's "stdin" text instead.
//
// Deno may read /workspace (the run's input files) and write
// /workspace/out (its artifacts: context.artifacts.save writes there, with
// the writer taken before the tool loads).
//
// The jail starts Deno on this module directly (a warm jail is a Deno
// waiting here for its request on stdin). The tool's source arrives in the
// request and is imported as a data: module (text/javascript or
// application/typescript, which Deno strips of types); its own imports go
// through the import map like any other. Deno abbreviates data: URLs in
// stack traces; frames of the tool are reported as tool.js/tool.ts.

const PROTOCOL_VERSION = 1;
const TOOL_MEDIA_TYPES = {
  javascript: "text/javascript",
  typescript: "application/typescript",
};
const FRAME_STDOUT = 1;
const FRAME_ENVELOPE = 2;
const FRAME_BRIDGE = 3;
// The largest answer read from the runner (its cap is 8 MiB).
const MAX_ANSWER_BYTES = 16 << 20;
const LEVELS = ["debug", "info", "warning", "error"];
// Where a run's brokered secrets are written (jaillayout.SecretsDir), and
// the harness's exit status when they cannot be (sandbox/classify.go).
const SECRETS_DIR = "/run/execgate/secrets";
const EXIT_NO_SECRETS = 74;
const TOOL_ERROR_TYPES = ["ToolError", "InvalidInput"];

// Everything the harness needs after the tool has run is taken now, before
// any tool code can replace it.
const stdout = Deno.stdout;
const writeSync = stdout.writeSync.bind(stdout);
const stdin = Deno.stdin;
const stdinRead = stdin.read.bind(stdin);
const inspect = Deno.inspect;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const stringify = JSON.stringify;
const parse = JSON.parse;
const exit = Deno.exit;
const writeFileSync = Deno.writeFileSync;
const now = Date.now;
const isFinite = Number.isFinite;
const origConsole = globalThis.console;
const listen = Deno.listen;
const connect = Deno.connect;
const stderrWrite = Deno.stderr.writeSync.bind(Deno.stderr);
const errorOut = (text) => void stderrWrite(encoder.encode(text));
const chmodSync = Deno.chmodSync;
const revokeSync = Deno.permissions.revokeSync.bind(Deno.permissions);

function writeAll(bytes) {
  let off = 0;
  while (off < bytes.length) {
    off += writeSync(bytes.subarray(off));
  }
}

function frame(kind, payload) {
  const head = new Uint8Array(5);
  head[0] = kind;
  new DataView(head.buffer).setUint32(1, payload.length);
  writeAll(head);
  writeAll(payload);
}

function writeStdout(data) {
  const bytes = typeof data === "string" ? encoder.encode(data) : data;
  if (bytes.length > 0) frame(FRAME_STDOUT, bytes);
  return bytes.length;
}

// ---- stdout: console and Deno.stdout go through the framing ----

function format(args) {
  const parts = [];
  for (const a of args) parts.push(typeof a === "string" ? a : inspect(a, { colors: false, depth: 6 }));
  return parts.join(" ");
}

// stdinOf is the tool's Deno.stdin: the request's stdin bytes, then EOF.
function stdinOf(bytes) {
  let pos = 0;
  let readable;
  const take = (p) => {
    if (pos >= bytes.length) return null;
    const n = Math.min(p.length, bytes.length - pos);
    p.set(bytes.subarray(pos, pos + n));
    pos += n;
    return n;
  };
  return {
    rid: undefined,
    read: (p) => Promise.resolve(take(p)),
    readSync: (p) => take(p),
    // highWaterMark 0: nothing is pulled before the tool reads (read and
    // readSync share the bytes). Made on first use: building a stream loads
    // Deno's web streams module, a few ms of every run's start-up.
    get readable() {
      return readable ??= new ReadableStream({
        pull: (c) => {
          if (pos >= bytes.length) {
            c.close();
            return;
          }
          const chunk = bytes.slice(pos, Math.min(bytes.length, pos + (64 << 10)));
          pos += chunk.length;
          c.enqueue(chunk);
        },
      }, { highWaterMark: 0 });
    },
    isTerminal: () => false,
    setRaw: () => {},
    close: () => {},
  };
}

function installConsole(stdinText, packages) {
  const counts = new Map();
  const timers = new Map();
  let indent = "";
  const out = (...args) => {
    let text = format(args);
    if (indent) text = indent + text.split("\n").join("\n" + indent);
    writeStdout(text + "\n");
  };
  const c = Object.create(null);
  for (const k of Object.keys(origConsole)) c[k] = origConsole[k];
  Object.assign(c, {
    log: out,
    info: out,
    debug: out,
    dir: (obj) => out(obj),
    dirxml: out,
    table: (data) => out(data),
    group: (...args) => {
      if (args.length) out(...args);
      indent += "  ";
    },
    groupCollapsed: (...args) => {
      if (args.length) out(...args);
      indent += "  ";
    },
    groupEnd: () => {
      indent = indent.slice(2);
    },
    count: (label = "default") => {
      const n = (counts.get(label) || 0) + 1;
      counts.set(label, n);
      out(`${label}: ${n}`);
    },
    countReset: (label = "default") => counts.delete(label),
    time: (label = "default") => timers.set(label, now()),
    timeLog: (label = "default", ...args) => out(`${label}: ${now() - (timers.get(label) ?? now())}ms`, ...args),
    timeEnd: (label = "default") => {
      out(`${label}: ${now() - (timers.get(label) ?? now())}ms`);
      timers.delete(label);
    },
    clear: () => {},
  });
  globalThis.console = c;
  let writable;
  const framedStdout = {
    rid: undefined,
    // Made on first use, like Deno.stdin.readable.
    get writable() {
      return writable ??= new WritableStream({ write: (chunk) => void writeStdout(chunk) });
    },
    write: (p) => Promise.resolve(writeStdout(p)),
    writeSync: (p) => writeStdout(p),
    isTerminal: () => false,
    close: () => {},
  };
  Object.defineProperty(Deno, "stdout", { value: framedStdout, writable: false, configurable: false });
  // stdin carries the bridge's answers: the tool reads the request's stdin
  // text, then EOF.
  Object.defineProperty(Deno, "stdin", { value: stdinOf(encoder.encode(stdinText)), writable: false, configurable: false });
  // Two ways to fd 1 need no permission: Deno's internal namespace
  // (Deno[Deno.internal].core.writeSync(1, bytes)) and Node's
  // process.stdout. A raw write would break the framing or forge a frame
  // (a bridge request, an envelope), so both go before the tool loads.
  // npm packages need Node's process (process.env.NODE_ENV, nextTick): in
  // a run with packages it stays, its env empty and its stdout written
  // through the framing (a Node stream writes through _write and _writev).
  const gone = [[Deno, Deno.internal, "Deno[Deno.internal]"]];
  if (!packages) gone.push([globalThis, "process", "process"]);
  for (const [obj, key, what] of gone) {
    if (!delete obj[key] || obj[key] !== undefined) throw new Error(`the harness could not remove ${what}`);
  }
  if (packages) {
    // process.env is an empty object of its own: packages that read
    // NODE_ENV or list the environment work, and nothing of the jail's
    // environment is read (Deno.env stays denied).
    Object.defineProperty(globalThis.process, "env", { value: {}, writable: true, enumerable: true, configurable: true });
    const out = globalThis.process.stdout;
    out._write = (chunk, encoding, cb) => {
      writeStdout(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      cb();
    };
    out._writev = (chunks, cb) => {
      for (const c of chunks) writeStdout(typeof c.chunk === "string" ? encoder.encode(c.chunk) : c.chunk);
      cb();
    };
    // Node's process.stdin reads fd 0, which carries the bridge's answers:
    // it reads the request's stdin instead, the bytes Deno.stdin reads
    // (one position for both). Readable comes from the stream classes
    // process.stdout is made of (node: imports are blocked here too).
    const Readable = out.constructor?.Readable;
    if (typeof Readable?.from !== "function") throw new Error("the harness could not replace process.stdin");
    const toolStdin = Deno.stdin;
    const nodeStdin = Readable.from((function* () {
      const buf = new Uint8Array(64 << 10);
      for (let n; (n = toolStdin.readSync(buf)) !== null;) yield buf.slice(0, n);
    })(), { objectMode: false });
    Object.defineProperty(globalThis.process, "stdin", { get: () => nodeStdin, enumerable: true, configurable: false });
  }
  // alert/confirm/prompt write to stdout and wait on stdin.
  const noPrompt = () => {
    throw new Error("alert, confirm and prompt are not available to tools");
  };
  globalThis.alert = noPrompt;
  globalThis.confirm = noPrompt;
  globalThis.prompt = noPrompt;
  // No workers: a worker is another isolate fed from a URL (data:, the
  // harness itself), outside what this module controls.
  globalThis.Worker = class Worker {
    constructor() {
      throw new TypeError("Worker is not available to tools");
    }
  };
  // No blob: URLs: they would let a tool import code built from strings.
  URL.createObjectURL = () => {
    throw new TypeError("URL.createObjectURL is not available to tools (blob: imports are blocked)");
  };
}

// ---- network mode proxy: the egress relay ----

// Where the relay listens inside the jail (HTTP_PROXY and HTTPS_PROXY name
// it; sandbox/render.go egressProxyURL).
const EGRESS_LISTEN = { hostname: "127.0.0.1", port: 3128 };

// startEgressRelay serves EGRESS_LISTEN and relays every connection to the
// egress proxy's unix socket at path (bound read-only into the jail by the
// runner), both ways, each direction's end passed on as a half-close. A
// connection the proxy does not accept is closed: the tool sees an error,
// never a fake success. The relay runs on the tool's event loop, before the
// tool loads; a tool that stalls the loop stalls only its own traffic.
function startEgressRelay(path) {
  const listener = listen({ ...EGRESS_LISTEN, transport: "tcp" });
  (async () => {
    for await (const conn of listener) relay(conn, path);
  })().catch((e) => errorOut(`execgate harness: the egress relay stopped: ${describe(e)}\n`));
}

async function relay(conn, path) {
  let up;
  try {
    up = await connect({ transport: "unix", path });
  } catch {
    try {
      conn.close();
    } catch { /* already closed */ }
    return;
  }
  const pass = (from, to) => from.readable.pipeTo(to.writable).catch(() => {});
  await Promise.allSettled([pass(conn, up), pass(up, conn)]);
  for (const c of [conn, up]) {
    try {
      c.close();
    } catch { /* already closed */ }
  }
}

// ---- envelope ----

let done = false;

// Deno.exit dispatches "unload" to the tool's handlers unless this flag of
// Deno's reads true: once the envelope is written (done), none of the
// tool's code runs again. Non-configurable, so a tool cannot take it back;
// Deno's own dispatch of unload still sets it.
let unloadDispatched = false;
Object.defineProperty(globalThis, Symbol.for("Deno.isUnloadDispatched"), {
  get: () => done || unloadDispatched,
  set: (v) => {
    unloadDispatched = Boolean(v);
  },
  configurable: false,
  enumerable: false,
});

function emit(status, resultJSON, error, logs) {
  if (done) return;
  done = true;
  const env = { protocol_version: PROTOCOL_VERSION, status, logs };
  if (error) env.error = error;
  if (artifactMimes.size > 0) env.artifacts = Object.fromEntries(artifactMimes);
  const head = stringify(env);
  const body = '{"result":' + (resultJSON ?? "null") + "," + head.slice(1);
  frame(FRAME_ENVELOPE, encoder.encode(body));
  exit(0);
}

function errorInfo(type, message, traceback = "", line = 0) {
  const e = { type, message: String(message) };
  if (traceback) e.traceback = traceback;
  if (line > 0) e.line = line;
  return e;
}

// ---- the tool's frames of a stack ----

// A tool frame's location: the tool's data: URL (whole, or as Deno
// abbreviates it: "data:<type>;base64,<first 20>......<last 20>") with
// line and column.
const TOOL_LOCATION = /data:(?:text\/javascript|application\/typescript);base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/g;
let toolName = "tool.js";

function userFrames(stack) {
  const out = [];
  for (const l of String(stack ?? "").split("\n")) {
    if (!l.trimStart().startsWith("at ")) continue;
    TOOL_LOCATION.lastIndex = 0;
    if (!TOOL_LOCATION.test(l)) continue;
    TOOL_LOCATION.lastIndex = 0;
    out.push(l.replace(TOOL_LOCATION, `${toolName}:$1:$2`).replace(/ Module\./, " "));
  }
  return out;
}

function firstUserLine(text) {
  TOOL_LOCATION.lastIndex = 0;
  const m = TOOL_LOCATION.exec(String(text ?? ""));
  TOOL_LOCATION.lastIndex = 0;
  return m ? { line: Number(m[1]), col: Number(m[2]) } : { line: 0, col: 0 };
}

const TOOL_URL = /data:(?:text\/javascript|application\/typescript);base64,[A-Za-z0-9+/=.]*/g;

function shorten(text) {
  TOOL_LOCATION.lastIndex = 0;
  TOOL_URL.lastIndex = 0;
  return String(text).replace(TOOL_LOCATION, `${toolName}:$1:$2`).replace(TOOL_URL, toolName);
}

function describe(e) {
  if (e instanceof Error) {
    const name = e.name || "Error";
    return shorten(e.message ? `${name}: ${e.message}` : name);
  }
  try {
    return "thrown value: " + inspect(e, { colors: false, depth: 2 });
  } catch {
    return "thrown value (unprintable)";
  }
}

function traceback(e) {
  const head = describe(e);
  const frames = e instanceof Error ? userFrames(e.stack) : [];
  return [head, ...frames].join("\n");
}

// blockedImport turns the import map's blocked:// targets into a sentence.
function blockedImport(message) {
  const rel = /Import "([^"]*)" not a dependency and not in import map/.exec(message);
  if (rel) return `imports are closed: relative, absolute and bare specifiers are blocked (${rel[1]})`;
  const m = /blocked:\/\/import\/([a-z]+)\/?([^"\s]*)/.exec(message);
  if (!m) return "";
  const what = { file: "file: and relative", node: "node:", npm: "npm:", jsr: "jsr:", http: "remote", https: "remote" }[m[1]] || m[1];
  return `imports are closed: ${what} specifiers are blocked (${m[1]}${m[2] ? " " + m[2] : ""})`;
}

// ---- context ----

class ToolFailure extends Error {
  constructor(type, message = "") {
    if (!TOOL_ERROR_TYPES.includes(type)) {
      message = message ? `${type}: ${message}` : String(type);
      type = "ToolError";
    }
    super(message);
    this.name = "ToolFailure";
    this.type = type;
  }
}

class InvalidInput extends ToolFailure {
  constructor(message = "") {
    super("InvalidInput", message);
    this.name = "InvalidInput";
  }
}

class LogSink {
  constructor(maxLines) {
    this.lines = [];
    this.dropped = 0;
    this.maxLines = maxLines;
  }
  add(message, level = "info") {
    if (typeof message !== "string") message = format([message]);
    if (level === "warn") level = "warning";
    if (!LEVELS.includes(level)) level = "info";
    if (this.lines.length >= this.maxLines) {
      this.dropped++;
      return;
    }
    if (message.length > 8192) message = message.slice(0, 8192) + "...[truncated]";
    this.lines.push({ level, message });
  }
  export() {
    const out = this.lines.slice();
    if (this.dropped) out.push({ level: "warning", message: `${this.dropped} log lines dropped (limit ${this.maxLines})` });
    return out;
  }
}

// ---- the tool bridge (sandbox/bridge.go) ----

// ToolBridgeError is the base of what context.tools rejects with: .type is
// the bridge error type (ToolDenied, ...), .message the bridge's message,
// .tool the tool's name. Uncaught, the run ends in a ToolError whose
// message starts with the type, as in Python.
class ToolBridgeError extends ToolFailure {
  static typeName = "ToolFailed";
  constructor(message = "", tool = undefined) {
    super("ToolError", message);
    const type = new.target.typeName;
    this.name = type;
    this.type = type;
    this.reason = String(message);
    this.tool = tool;
  }
}
// The tool is not granted to this run, or policy or a limit denied the call.
class ToolDenied extends ToolBridgeError {
  static typeName = "ToolDenied";
}
// The tool's server cannot be reached, or the bridge is gone.
class ToolUnavailable extends ToolBridgeError {
  static typeName = "ToolUnavailable";
}
// The call outlived its timeout or the run's deadline.
class ToolTimeout extends ToolBridgeError {
  static typeName = "ToolTimeout";
}
// The tool's server answered with an error, or an unusable result.
class ToolFailed extends ToolBridgeError {
  static typeName = "ToolFailed";
}
const BRIDGE_ERRORS = { ToolDenied, ToolUnavailable, ToolTimeout, ToolFailed };

// StdinFrames reads length-prefixed frames from stdin: the request, then
// the bridge's answers.
class StdinFrames {
  constructor() {
    this.chunk = new Uint8Array(64 << 10);
    this.pos = 0;
    this.len = 0;
  }
  // readExact returns n bytes, or null at EOF.
  async readExact(n) {
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      if (this.pos >= this.len) {
        const r = await stdinRead(this.chunk);
        if (r === null) return null;
        this.pos = 0;
        this.len = r;
      }
      const k = Math.min(n - off, this.len - this.pos);
      out.set(this.chunk.subarray(this.pos, this.pos + k), off);
      off += k;
      this.pos += k;
    }
    return out;
  }
  // readFrame returns one frame's payload, or null at EOF.
  async readFrame(max) {
    const head = await this.readExact(4);
    if (head === null) return null;
    const n = new DataView(head.buffer).getUint32(0);
    if (n > max) throw new RangeError(`a frame of ${n} bytes is over the ${max}-byte cap`);
    return await this.readExact(n);
  }
}
const stdinFrames = new StdinFrames();

// Bridge is the one path from a tool to host tools: requests are kind-3
// frames on stdout, answers frames on stdin, matched by id (calls may
// overlap). At most maxInflight requests are unanswered at once; later
// calls wait here, in order. In test mode the runner answers from the
// run's fixtures (FixtureBridge): the same path, nothing leaves the runner.
class Bridge {
  constructor(info) {
    info = info && typeof info === "object" ? info : {};
    this.version = Number(info.version) || 1;
    this.max = Number(info.max_request_bytes) || 1 << 20;
    this.maxInflight = Number(info.max_inflight) || 16;
    this.nextId = 1;
    this.waiting = new Map(); // id -> settle(answer)
    this.queue = []; // [data builder, settle, name] waiting for a slot
    this.dead = null; // why the bridge is gone
    this.reading = false;
  }
  call(op, fields) {
    const name = fields.name;
    if (this.dead !== null) return Promise.reject(new ToolUnavailable(this.dead, name));
    let body;
    try {
      body = stringify(fields, (k, v) => {
        if (typeof v === "number" && !isFinite(v)) throw new TypeError(`${v} is not JSON`);
        if (typeof v === "bigint") throw new TypeError("a BigInt is not JSON");
        return v;
      });
    } catch (e) {
      return Promise.reject(new ToolFailed("the arguments are not JSON-serialisable: " + describe(e), name));
    }
    if (body === undefined) body = "{}";
    return new Promise((resolve, reject) => {
      const settle = (a) => {
        const err = a?.error;
        if (err) {
          const cls = BRIDGE_ERRORS[err.type] ?? ToolFailed;
          reject(new cls(err.message || cls.typeName, name));
        } else {
          resolve(a?.result ?? null);
        }
      };
      this.queue.push([op, body, settle]);
      this.pump();
    });
  }
  pump() {
    while (this.dead === null && this.queue.length > 0 && this.waiting.size < this.maxInflight) {
      const [op, body, settle] = this.queue.shift();
      const id = this.nextId++;
      const head = `{"v":${this.version},"id":${id},"op":${stringify(op)}`;
      const data = encoder.encode(body === "{}" ? head + "}" : head + "," + body.slice(1));
      if (data.length > this.max) {
        settle({ error: { type: "ToolDenied", message: `the request is ${data.length} bytes, over the bridge's ${this.max}-byte cap` } });
        continue;
      }
      this.waiting.set(id, settle);
      try {
        frame(FRAME_BRIDGE, data);
      } catch (e) {
        this.die("the tool bridge is closed (" + describe(e) + ")");
        return;
      }
    }
    if (this.waiting.size > 0 && !this.reading) {
      this.reading = true;
      this.readLoop();
    }
  }
  async readLoop() {
    let reason = "the tool bridge is closed";
    try {
      while (this.waiting.size > 0) {
        const data = await stdinFrames.readFrame(MAX_ANSWER_BYTES);
        if (data === null) break;
        const a = parse(decoder.decode(data));
        const settle = this.waiting.get(a?.id);
        if (settle !== undefined) {
          this.waiting.delete(a.id);
          settle(a);
          this.pump();
        } else if (a?.id === 0 && a?.error) {
          reason = String(a.error.message || reason);
          break;
        }
      }
      if (this.waiting.size === 0) return;
    } catch {
      // A broken answer stream: the bridge is gone.
    } finally {
      this.reading = false;
    }
    this.die(reason);
  }
  die(reason) {
    if (this.dead === null) this.dead = reason;
    const gone = { error: { type: "ToolUnavailable", message: this.dead } };
    const waiting = [...this.waiting.values()];
    const queued = this.queue.map((q) => q[2]);
    this.waiting.clear();
    this.queue = [];
    for (const settle of [...waiting, ...queued]) settle(gone);
  }
}

// ---- artifacts (sandbox/workspace) ----

// Where a run's artifacts go: every file left there is collected by the
// runner after the run.
const OUT_DIR = "/workspace/out";
const MAX_MIMES = 1000;
// Media types given to context.artifacts.save, by name (for the envelope).
const artifactMimes = new Map();

// checkArtifactName: the rules of sandbox/workspace CheckName.
function checkArtifactName(name) {
  if (typeof name !== "string") throw new TypeError(`an artifact's name must be a string, not ${typeof name}`);
  const n = encoder.encode(name).length;
  if (n === 0 || n > 255) throw new RangeError(`an artifact's name must be 1 to 255 bytes, not ${n}`);
  if (name === "." || name === "..") throw new RangeError(`an artifact's name cannot be "${name}"`);
  for (const ch of name) {
    const c = ch.codePointAt(0);
    if (c < 0x20 || c === 0x7f || (c >= 0x80 && c < 0xa0) || (c >= 0xd800 && c < 0xe000)) {
      throw new RangeError(`an artifact's name cannot contain U+${c.toString(16).padStart(4, "0")}`);
    }
    if (ch === "/" || ch === "\\") throw new RangeError(`an artifact's name cannot contain "${ch}" (artifacts are files directly in ${OUT_DIR})`);
  }
}

const MIME_TOKEN = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$/;

// checkMime: the rules of sandbox/workspace CheckMIME.
function checkMime(mime) {
  if (typeof mime !== "string") throw new TypeError(`mime must be a string, not ${typeof mime}`);
  const i = mime.indexOf("/");
  if (mime.length > 127 || i < 0 || !MIME_TOKEN.test(mime.slice(0, i)) || !MIME_TOKEN.test(mime.slice(i + 1))) {
    throw new RangeError(`mime "${mime}" is not a media type (type/subtype, lower case, no parameters)`);
  }
}

function bytesOf(data) {
  if (typeof data === "string") return encoder.encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError("data must be a string, a Uint8Array or an ArrayBuffer");
}

function makeArtifacts() {
  return Object.freeze({
    // save(name, data, mime) writes data (a string, as UTF-8, or bytes) to
    // /workspace/out/<name> and returns its path; mime labels it (else its
    // extension does). A file of that name is replaced.
    save: (name, data, mime = undefined) => {
      checkArtifactName(name);
      if (mime !== undefined && mime !== null) checkMime(mime);
      const path = OUT_DIR + "/" + name;
      writeFileSync(path, bytesOf(data));
      if (mime === undefined || mime === null) artifactMimes.delete(name);
      else if (artifactMimes.has(name) || artifactMimes.size < MAX_MIMES) artifactMimes.set(name, mime);
      return path;
    },
  });
}

// Properties of context.tools that are never tool names (await, JSON, inspection).
const NOT_TOOLS = new Set(["then", "toJSON", "constructor", "prototype"]);

function makeTools(bridge) {
  const api = {
    // search(query, {limit}) lists the granted tools matching query.
    search: (query = "", opts = {}) => {
      const limit = typeof opts === "number" ? opts : Number(opts?.limit ?? 10);
      return bridge.call("search", { query: String(query), limit: Number.isInteger(limit) ? limit : 10 });
    },
    // describe(name) is the tool's description and input schema.
    describe: (name) => bridge.call("describe", { name: String(name) }),
    // run(name, args) calls the tool; it rejects with ToolDenied,
    // ToolUnavailable, ToolTimeout or ToolFailed.
    run: (name, args = null) => bridge.call("run", { name: String(name), args: args ?? {} }),
  };
  api.run_async = api.run;
  // context.tools.<name>(args) is context.tools.run(name, args).
  return new Proxy(api, {
    get(target, prop) {
      if (typeof prop !== "string" || NOT_TOOLS.has(prop)) return undefined;
      if (Object.hasOwn(target, prop)) return target[prop];
      return (args = null) => target.run(prop, args);
    },
    set() {
      return false;
    },
  });
}

function makeContext(req, sink, secrets) {
  const deadline = Number(req.deadline_unix_ms) || 0;
  const ctx = {
    tenantId: String(req.tenant_id ?? ""),
    executionId: String(req.execution_id ?? ""),
    variables: req.variables && typeof req.variables === "object" ? req.variables : {},
    // The brokered secrets granted to the run, by name (also files under
    // /run/execgate/secrets/); a secret not granted is undefined.
    secrets,
    mode: String(req.mode ?? "run"),
    deadline,
    remaining: () => Math.max(0, deadline - now()),
    log: (message, level = "info") => sink.add(message, level),
    tools: makeTools(new Bridge(req.bridge)),
    artifacts: makeArtifacts(),
    ToolFailure,
    InvalidInput,
    ToolDenied,
    ToolUnavailable,
    ToolTimeout,
    ToolFailed,
  };
  return Object.freeze(ctx);
}

// ---- result ----

function serialise(result) {
  const replacer = function (key, value) {
    switch (typeof value) {
      case "number":
        if (!isFinite(value)) throw new TypeError(`${value} is not JSON (at ${key || "the result"})`);
        return value;
      case "function":
      case "symbol":
        throw new TypeError(`a ${typeof value} is not JSON (at ${key || "the result"})`);
      case "undefined":
        if (Array.isArray(this)) throw new TypeError(`undefined is not JSON (at index ${key})`);
        return value;
    }
    return value;
  };
  if (result === undefined) return "null";
  return stringify(result, replacer);
}

// ---- secrets ----

// takeSecrets writes the request's secrets to SECRETS_DIR/NAME (0400, never
// over an existing file), makes the directory read-only, revokes this
// process's write permission there (whether or not the run has secrets:
// before any tool code, so the tool never has it) and returns them as
// context.secrets: a frozen object without a prototype.
function takeSecrets(req) {
  const secrets = req.secrets ?? {};
  const entries = typeof secrets === "object" && !Array.isArray(secrets) ? Object.entries(secrets) : null;
  if (entries === null || !entries.every(([k, v]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) && typeof v === "string")) {
    emit("error", null, errorInfo("ProtocolMismatch", "the request's secrets are not a map of names to strings"), []);
  }
  try {
    for (const [name, value] of entries) {
      writeFileSync(`${SECRETS_DIR}/${name}`, encoder.encode(value), { mode: 0o400, createNew: true });
    }
    if (entries.length > 0) chmodSync(SECRETS_DIR, 0o500);
    if (revokeSync({ name: "write", path: SECRETS_DIR }).state === "granted") throw new Error("the write permission was not revoked");
  } catch (e) {
    errorOut(`execgate harness: the run's secrets could not be written to ${SECRETS_DIR}: ${e?.message ?? e}\n`);
    exit(EXIT_NO_SECRETS);
  }
  return Object.freeze(Object.assign(Object.create(null), Object.fromEntries(entries)));
}

// ---- main ----

async function readRequest() {
  const data = await stdinFrames.readFrame(0xffffffff);
  if (data === null) throw new Error("stdin ended before the request");
  return parse(decoder.decode(data));
}

// base64 is text's UTF-8 bytes in base64. Not btoa: its first use loads
// Deno's base64 module, about 2 ms of every run (measured on Deno 2.9.8).
const BASE64_DIGITS = encoder.encode("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
const BASE64_PAD = 61; // "="

function base64(text) {
  const bytes = encoder.encode(text);
  const out = new Uint8Array(Math.ceil(bytes.length / 3) * 4);
  let o = 0;
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out[o++] = BASE64_DIGITS[n >> 18];
    out[o++] = BASE64_DIGITS[(n >> 12) & 63];
    out[o++] = BASE64_DIGITS[(n >> 6) & 63];
    out[o++] = BASE64_DIGITS[n & 63];
  }
  if (i < bytes.length) {
    const two = i + 1 < bytes.length;
    const n = (bytes[i] << 16) | (two ? bytes[i + 1] << 8 : 0);
    out[o++] = BASE64_DIGITS[n >> 18];
    out[o++] = BASE64_DIGITS[(n >> 12) & 63];
    out[o++] = two ? BASE64_DIGITS[(n >> 6) & 63] : BASE64_PAD;
    out[o++] = BASE64_PAD;
  }
  return decoder.decode(out);
}

async function importTool(language, source) {
  const type = TOOL_MEDIA_TYPES[language] ?? TOOL_MEDIA_TYPES.javascript;
  toolName = language === "typescript" ? "tool.ts" : "tool.js";
  return await import(`data:${type};base64,${base64(String(source))}`);
}

function findEntry(mod, entry) {
  let fn = mod[entry];
  if (fn === undefined && entry === "run" && mod.default !== undefined) {
    fn = typeof mod.default === "function" ? mod.default : mod.default?.run;
  }
  return fn;
}

async function runTool(req, sink, secrets) {
  const entry = req.entrypoint || "run";
  let mod;
  try {
    mod = await importTool(req.language, req.source);
  } catch (e) {
    const msg = shorten(e instanceof Error ? String(e.message) : describe(e));
    const where = firstUserLine(msg + "\n" + (e?.stack ?? ""));
    const blocked = blockedImport(msg);
    if (blocked) return ["error", null, errorInfo("InvalidSource", blocked, msg, where.line)];
    const syntax = msg.includes("SyntaxError") || msg.includes("Expected") || msg.includes("expected");
    const text = syntax ? msg.split("\n")[0].replace(/^(TypeError: )?/, "") : "error while loading the tool: " + describe(e);
    return ["error", null, errorInfo("InvalidSource", text, syntax ? msg : traceback(e), where.line)];
  }
  const fn = findEntry(mod, entry);
  if (typeof fn !== "function") {
    const names = Object.keys(mod).filter((k) => typeof mod[k] === "function").sort();
    let msg = fn === undefined ? `entrypoint "${entry}" not found in the tool (export it: export function ${entry}(args, context) {...})` : `entrypoint "${entry}" is not a function (${typeof fn})`;
    if (names.length) msg += "; it exports: " + names.join(", ");
    return ["error", null, errorInfo("EntrypointNotFound", msg)];
  }
  const ctx = makeContext(req, sink, secrets);
  let result;
  try {
    result = await fn(req.args ?? null, ctx);
  } catch (e) {
    const line = e instanceof Error ? firstUserLine(e.stack).line : 0;
    if (e instanceof ToolBridgeError) return ["error", null, errorInfo("ToolError", `${e.type}: ${e.message}`, traceback(e), line)];
    if (e instanceof ToolFailure) return ["error", null, errorInfo(e.type, e.message, traceback(e), line)];
    return ["error", null, errorInfo("ToolError", describe(e), traceback(e), line)];
  }
  let text;
  try {
    text = serialise(result);
  } catch (e) {
    return ["error", null, errorInfo("InvalidResult", "the result is not JSON-serialisable: " + describe(e))];
  }
  return ["ok", text, null];
}

async function main() {
  // Deno loads its module loader on first use (the tool's import): it is
  // used once here, before the request, so a started Deno (a warm jail, a
  // run's process at level process) has paid for it before the hand-off.
  // Not web streams: the harness makes Deno.stdin.readable and
  // Deno.stdout.writable only when a tool uses them (1.5-3 ms of CPU the
  // first time), which a trivial run never does. Not the TypeScript
  // transpiler: Deno writes every transpiled module to DENO_DIR/gen, and on
  // the jail's read-only cache it retries that write for about 150 ms of
  // wall time before it goes on, which would land on every JavaScript run.
  await import("data:text/javascript,export default 1");
  let req;
  try {
    req = await readRequest();
  } catch (e) {
    emit("error", null, errorInfo("ProtocolMismatch", "the request is not valid JSON: " + describe(e)), []);
    return;
  }
  if (!req || req.protocol_version !== PROTOCOL_VERSION) {
    emit("error", null, errorInfo("ProtocolMismatch", `the harness speaks protocol ${PROTOCOL_VERSION}, the request has ${req?.protocol_version}`), []);
    return;
  }
  if (req.egress_socket) {
    try {
      startEgressRelay(String(req.egress_socket));
    } catch (e) {
      errorOut(`execgate harness: the egress relay could not start on ${EGRESS_LISTEN.hostname}:${EGRESS_LISTEN.port}: ${describe(e)}\n`);
    }
  }
  const secrets = takeSecrets(req);
  const sink = new LogSink(Number(req.max_log_lines) || 1000);
  globalThis.execgate = Object.freeze({ ToolFailure, InvalidInput, ToolDenied, ToolUnavailable, ToolTimeout, ToolFailed, log: (m, l) => sink.add(m, l) });
  installConsole(typeof req.stdin === "string" ? req.stdin : "", req.deps === true);
  // An error thrown or a promise rejected outside the tool's awaited path
  // ends the run as the tool's error rather than as Deno's.
  globalThis.addEventListener("error", (ev) => {
    ev.preventDefault();
    const e = ev.error;
    emit("error", null, errorInfo("ToolError", "uncaught: " + describe(e), traceback(e)), sink.export());
  });
  globalThis.addEventListener("unhandledrejection", (ev) => {
    ev.preventDefault();
    const e = ev.reason;
    emit("error", null, errorInfo("ToolError", "unhandled rejection: " + describe(e), traceback(e)), sink.export());
  });
  const [status, result, error] = await runTool(req, sink, secrets);
  emit(status, result, error, sink.export());
}

await main();
