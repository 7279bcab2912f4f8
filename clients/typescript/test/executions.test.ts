// The async API, prepare and tools against a real gateway (server.ts):
// submit, get, wait, cancel, events (resumed after a dropped connection).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import * as execgate from "../src/index.js";
import { Client, type ExecutionEvent } from "../src/index.js";
import { startGateway, type Gateway } from "./server.js";

const LINES = 10;
// Prints LINES lines, one every 0.3 s, logs once, returns LINES.
const TICKER =
  "import time\n\ndef run(args, context):\n" +
  `    for i in range(${LINES}):\n        print('line', i, flush=True)\n        time.sleep(0.3)\n` +
  `    context.log('ticked')\n    return ${LINES}\n`;
const QUICK = TICKER.replace("time.sleep(0.3)", "pass");
const EXPECTED = Array.from({ length: LINES }, (_, i) => `line ${i}\n`).join("");
const SLEEPER = "import time\n\ndef run(args, context):\n    time.sleep(20)\n    return 'woke'\n";
const IMPORT_PROBE = "import egprobe\n\ndef run(args, context):\n    return egprobe.VERSION\n";

let gw: Gateway;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

const client = (opts: execgate.ClientOptions = {}) => new Client({ baseUrl: gw.url, token: gw.token(), ...opts });

async function collect(it: AsyncIterable<ExecutionEvent>): Promise<ExecutionEvent[]> {
  const out: ExecutionEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

const stdout = (evs: ExecutionEvent[]) => evs.map((e) => (e.type === "stdout" ? e.text : "")).join("");

function assertIncreasingIds(evs: ExecutionEvent[]) {
  const ids = evs.map((e) => e.id);
  assert.ok(ids.every((i) => i !== undefined), `ids ${ids}`);
  assert.deepEqual(ids, [...new Set(ids)].sort((a, b) => a! - b!), `ids ${ids}`);
}

async function rejects<T extends execgate.ExecgateError>(p: Promise<unknown>, cls: new (...a: any[]) => T): Promise<T> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof cls, `got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    return e as T;
  }
  assert.fail(`expected ${cls.name}`);
}

describe("submit, get, wait", () => {
  test("submit then wait resolves to the envelope", async () => {
    const c = client();
    const st = await c.submit("def run(args, context):\n    return args * 2\n", { args: 21 });
    assert.equal(st.status, "queued");
    assert.equal(st.execution_id.length, 32);
    const env = await c.wait(st.execution_id, { timeout: 60 });
    assert.equal(env.result, 42);
    const done = await c.get(st.execution_id);
    assert.equal(done.status, "done");
    assert.equal(done.http_status, 200);
    assert.ok(done.submitted_at && done.started_at && done.finished_at);
  });

  test("submit takes the execute fields and callback_url", async () => {
    const c = client();
    // isolation reaches the policy (decided in the background): demo is granted jail only.
    const { execution_id } = await c.submit("def run(args, context):\n    return 1\n", { isolation: "process" });
    const e = await rejects(c.wait(execution_id, { timeout: 60 }), execgate.PolicyDenied);
    assert.equal(e.status, 403);
    assert.ok(e.reasons.some((r) => r.includes("isolation")), String(e.reasons));
    assert.equal((await c.get(execution_id)).http_status, 403);
    // callback_url reaches the gateway: a host off the tenant's callbacks list is refused at submit.
    const cb = await rejects(c.submit("def run(args, context):\n    return 1\n", { callback_url: "https://hooks.example.com/x" }), execgate.PolicyDenied);
    assert.ok(cb.reasons.some((r) => r.includes("callback host hooks.example.com")), String(cb.reasons));
    const ts = await c.submit("export function run(a: {n: number}) { return a.n + 1 }\n", { language: "typescript", args: { n: 1 }, isolation: "jail" });
    const env = await c.wait(ts.execution_id, { timeout: 60 });
    assert.equal(env.result, 2);
    assert.equal(env.usage.isolation, "jail");
  });

  test("wait throws the run's error like execute; check false returns it; timeout", async () => {
    const c = client();
    const { execution_id } = await c.submit("def run(args, context):\n    raise ValueError('nope')\n");
    await rejects(c.wait(execution_id, { timeout: 60 }), execgate.ToolError);
    assert.equal((await c.wait(execution_id, { check: false })).error?.type, "ToolError");
    const slow = await c.submit(SLEEPER, { limits: { timeout_ms: 25000 } });
    await assert.rejects(c.wait(slow.execution_id, { timeout: 0.5 }), /still (queued|running)/);
    await c.cancel(slow.execution_id);
  });

  test("an admin names the owning tenant", async () => {
    const c = client();
    const { execution_id } = await c.submit("def run(args, context):\n    return 7\n");
    await c.wait(execution_id, { timeout: 60 });
    const admin = new Client({ baseUrl: gw.url, token: gw.token("limited", "admin") });
    await rejects(admin.get(execution_id), execgate.NotFound); // not an execution of the admin's own tenant
    assert.equal((await admin.get(execution_id, { tenant: "demo" })).envelope?.result, 7);
    const evs = await collect(admin.events(execution_id, { tenant: "demo" }));
    assert.equal(evs[evs.length - 1].type, "envelope");
    assert.equal((await admin.cancel(execution_id, { tenant: "demo" })).status, "done");
  });

  test("an unknown execution is NotFound", async () => {
    await rejects(client().get("ts-never-submitted"), execgate.NotFound);
  });
});

describe("events", () => {
  test("stream the output, then the log, then the envelope", async () => {
    const c = client();
    const { execution_id } = await c.submit(TICKER);
    const evs = await collect(c.events(execution_id));
    assert.equal(stdout(evs), EXPECTED);
    assert.deepEqual(evs.filter((e) => e.type === "log").map((e) => e.type === "log" && e.message), ["ticked"]);
    const last = evs[evs.length - 1];
    assert.ok(last.type === "envelope" && last.envelope.result === LINES);
    assertIncreasingIds(evs);
  });

  test("resume after a dropped connection, with Last-Event-ID and without duplicates", async () => {
    // A real fetch whose first event stream is cut after 3 whole events plus
    // a few bytes of the next (a half-sent event must not be given out).
    const streams: Headers[] = [];
    const sleeps: number[] = [];
    const cutFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (!String(input).includes("/events")) return res;
      streams.push(new Headers(init?.headers));
      if (streams.length > 1) return res;
      const reader = res.body!.getReader();
      let buf = new Uint8Array(0);
      const body = new ReadableStream<Uint8Array>({
        async pull(ctl) {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) { ctl.enqueue(buf); ctl.close(); return; }
            const next = new Uint8Array(buf.length + value.length);
            next.set(buf);
            next.set(value, buf.length);
            buf = next;
            const text = new TextDecoder().decode(buf);
            let end = -2;
            for (let i = 0; i < 3 && end !== -1; i++) end = text.indexOf("\n\n", end + 2);
            if (end !== -1) {
              ctl.enqueue(new TextEncoder().encode(text.slice(0, end + 2 + 8)));
              await reader.cancel();
              ctl.error(new TypeError("connection dropped by the test"));
              return;
            }
          }
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    const c = client({ fetch: cutFetch, backoff: 0.02, sleep: async (s) => { sleeps.push(s); } });
    const { execution_id } = await c.submit(TICKER);
    const evs = await collect(c.events(execution_id));
    assert.equal(streams.length, 2);
    assert.equal(sleeps.length, 1);
    assert.equal(streams[0].get("Last-Event-ID"), null);
    // The reconnection named the last event given out, and the run was still
    // live: everything after it came, with ids, once.
    assert.equal(streams[1].get("Last-Event-ID"), String(evs[2].id));
    assertIncreasingIds(evs);
    assert.equal(stdout(evs), EXPECTED);
    const last = evs[evs.length - 1];
    assert.ok(last.type === "envelope" && last.envelope.stdout === EXPECTED);
    assert.equal(evs.filter((e) => e.type === "log").length, 1);
  });

  test("lastEventId starts after that event", async () => {
    const c = client();
    const { execution_id } = await c.submit(TICKER);
    const first: ExecutionEvent[] = [];
    for await (const ev of c.events(execution_id)) {
      first.push(ev);
      if (first.length === 2) break;
    }
    const rest = await collect(c.events(execution_id, { lastEventId: first[1].id }));
    assertIncreasingIds([...first, ...rest]);
    assert.equal(stdout([...first, ...rest]), EXPECTED);
  });

  test("an ended execution's events are its log and envelope", async () => {
    const c = client();
    const { execution_id } = await c.submit(QUICK);
    await c.wait(execution_id, { timeout: 60 });
    const evs = await collect(c.events(execution_id));
    assert.deepEqual(evs.map((e) => e.type), ["log", "envelope"]);
    assert.ok(evs[1].type === "envelope" && evs[1].envelope.stdout === EXPECTED && evs[1].id === undefined);
  });

  test("a rotating token is fetched again after a 401", async () => {
    const { execution_id } = await client().submit(QUICK);
    const tokens = ["garbage", gw.token()];
    let calls = 0;
    const evs = await collect(new Client({ baseUrl: gw.url, token: () => tokens[calls++] }).events(execution_id));
    assert.equal(evs[evs.length - 1].type, "envelope");
    assert.equal(calls, 2);
  });
});

describe("cancel", () => {
  test("stops a running execution", async () => {
    const c = client();
    const { execution_id } = await c.submit(SLEEPER, { limits: { timeout_ms: 25000 } });
    const deadline = Date.now() + 30_000;
    while ((await c.get(execution_id)).status !== "running") {
      assert.ok(Date.now() < deadline, "the execution never started");
      await new Promise((r) => setTimeout(r, 100));
    }
    const start = Date.now();
    const st = await c.cancel(execution_id);
    assert.ok(st.cancel_requested || st.status === "done", JSON.stringify(st));
    const e = await rejects(c.wait(execution_id, { timeout: 30 }), execgate.Cancelled);
    assert.ok(Date.now() - start < 15_000, "the run was not stopped");
    assert.equal(e.envelope?.status, "error");
    assert.equal((await c.cancel(execution_id)).status, "done"); // done: left as it is
  });
});

describe("a submission whose answer was lost is not submitted twice", () => {
  for (const failLookup of [false, true]) {
    test(failLookup ? "the lookup fails, the retry is refused, the lookup finds it" : "the lookup finds it", async () => {
      const seen: string[] = [];
      let lookupFails = failLookup;
      const lossy: typeof fetch = async (input, init) => {
        const path = new URL(String(input)).pathname;
        seen.push(`${init?.method} ${path}`);
        if (init?.method === "GET" && lookupFails) {
          lookupFails = false;
          throw new TypeError("lookup failed by the test");
        }
        const res = await fetch(input, init);
        if (init?.method === "POST" && seen.filter((s) => s === "POST /v1/executions").length === 1) {
          await res.text(); // it reached the gateway; its answer is lost
          throw new TypeError("answer lost by the test");
        }
        return res;
      };
      const st = await client({ fetch: lossy, backoff: 0.01, sleep: async () => {} })
        .submit("import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n");
      const want = ["POST /v1/executions", `GET /v1/executions/${st.execution_id}`];
      if (failLookup) want.push(...want);
      assert.deepEqual(seen, want);
      assert.equal((await client().wait(st.execution_id, { timeout: 60 })).status, "ok");
      const ran = gw.audit().filter((r) => r.execution_id === st.execution_id && r.usage.wall_ms > 0);
      assert.equal(ran.length, 1, `the tool ran ${ran.length} times`);
    });
  }
});

describe("prepare", () => {
  test("then run by environment_id, by lock and by requirements", async () => {
    const c = client();
    const env = await c.prepare({ requirements: ["egprobe"] });
    assert.match(env.environment_id, /^[0-9a-f]{64}$/);
    assert.deepEqual(env.packages.map((p) => [p.name, p.version, p.via]), [["egprobe", "1.0", ["egprobe"]]]);
    assert.match(env.lock, /egprobe==1\.0[\s\S]*--hash=sha256:/);
    assert.equal(env.network_access, "none");
    assert.equal(env.warm, 0);
    const again = await c.prepare({ requirements_lock: env.lock });
    assert.equal(again.environment_id, env.environment_id);
    assert.equal(again.cached, true);
    assert.equal((await c.execute(IMPORT_PROBE, { environment_id: env.environment_id })).result, "1.0");
    assert.equal((await c.execute(IMPORT_PROBE, { requirements_lock: env.lock })).result, "1.0");
    assert.equal((await c.execute(IMPORT_PROBE, { requirements: ["egprobe==1.0"] })).result, "1.0");
  });

  test("refusals", async () => {
    const c = client();
    const denied = await rejects(c.prepare({ requirements: ["egdenied"] }), execgate.PolicyDenied);
    assert.equal(denied.status, 403);
    assert.ok(denied.reasons.some((r) => r.includes("egdenied")), String(denied.reasons));
    const unresolvable = await rejects(c.prepare({ requirements: ["no-such-package"] }), execgate.DependencyError);
    assert.equal(unresolvable.status, 422);
    assert.match(unresolvable.traceback ?? "", /no-such-package/);
    const warm = await rejects(c.prepare({ requirements: ["egprobe"], warm: 3 as 2 }), execgate.BadRequest);
    assert.match(warm.message, /warm/);
  });
});

describe("tools", () => {
  test("lists the granted tools with their schemas", async () => {
    const c = client();
    const tl = await c.tools();
    assert.equal(tl.tenant_id, "demo");
    assert.deepEqual(tl.unavailable, []);
    assert.deepEqual(tl.tools.map((t) => t.name), ["self.validate"]);
    assert.equal(tl.tools[0].server, "self");
    assert.ok("source" in (tl.tools[0].input_schema as { properties: object }).properties);
    for (const s of [tl.python_stub, tl.typescript_stub, tl.prompt]) assert.match(s, /self\.validate/);
    assert.deepEqual((await c.tools({ names: ["self.val*"] })).tools.map((t) => t.name), ["self.validate"]);
    const e = await rejects(c.tools({ names: ["other.*"] }), execgate.RequestError);
    assert.ok([400, 403].includes(e.status), String(e.status));
  });

  test("a code-mode run calls a granted tool", async () => {
    const src = "def run(args, context):\n    return context.tools.run('self.validate', {'source': 'def run(:\\n'})\n";
    const env = await client().execute(src, { tools: ["self.validate"] });
    assert.equal((env.result as { valid: boolean }).valid, false);
    assert.equal(env.tool_calls?.[0].tool, "self.validate");
    await rejects(client().execute(src, { tools: ["other.*"] }), execgate.RequestError);
  });
});
