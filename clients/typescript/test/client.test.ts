// The TypeScript client against a real gateway (server.ts).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import * as execgate from "../src/index.js";
import { Client } from "../src/index.js";
import { DEMO_SECRET, startGateway, type Gateway } from "./server.js";

const ONE = "def run(args, context):\n    return 1\n";
const RANDOM = "import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n";

let gw: Gateway;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

const client = (tenant = "demo", opts: execgate.ClientOptions = {}) =>
  new Client({ baseUrl: gw.url, token: gw.token(tenant), ...opts });

async function rejects<T extends execgate.ExecgateError>(p: Promise<unknown>, cls: new (...a: any[]) => T): Promise<T> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof execgate.ExecgateError, `not an ExecgateError: ${e}`);
    assert.equal(e.constructor, cls, `got ${e.constructor.name}: ${e.message}`);
    return e as T;
  }
  assert.fail(`expected ${cls.name}`);
}

describe("execute", () => {
  test("returns the envelope", async () => {
    const env = await client().execute("def run(args, context):\n    print('hi')\n    return args['a'] + args['b']\n", { args: { a: 2, b: 3 } });
    assert.equal(env.status, "ok");
    assert.equal(env.result, 5);
    assert.match(env.stdout, /hi/);
    assert.equal(env.tenant_id, "demo");
    assert.equal(env.execution_id.length, 32);
    assert.equal(env.decision?.network_access, "none");
  });

  test("takes URL and token from the environment", async () => {
    process.env.EXECGATE_URL = gw.url;
    process.env.EXECGATE_TOKEN = gw.token();
    try {
      assert.equal((await new Client().execute(ONE)).result, 1);
    } finally {
      delete process.env.EXECGATE_URL;
      delete process.env.EXECGATE_TOKEN;
    }
  });

  test("validate", async () => {
    assert.equal((await client().validate(ONE)).valid, true);
    const bad = await client().validate("def run(:\n");
    assert.equal(bad.valid, false);
    assert.equal(bad.errors[0].line, 1);
  });

  test("validate takes the language", async () => {
    const ts = "export function run(): number {\n  const s: string = 1;\n  return 2;\n}\n";
    const bad = await client().validate(ts, { language: "typescript" });
    assert.equal(bad.valid, false);
    assert.equal(bad.errors[0].line, 2);
    assert.match(bad.errors[0].message, /TS2322/);
    assert.equal((await client().validate("export function run() { return 1 }\n", { language: "javascript" })).valid, true);
    assert.equal((await client().validate("export function run() { return 1 }\n")).valid, false); // Python by default
  });

  test("execute takes isolation", async () => {
    assert.equal((await client().execute(ONE, { isolation: "jail" })).usage.isolation, "jail");
    const e = await rejects(client().execute(ONE, { isolation: "process" }), execgate.PolicyDenied); // demo: jail only
    assert.ok(e.reasons.some((r) => r.includes("isolation")), String(e.reasons));
  });

  test("execute takes the runtime", async () => {
    const env = await client().execute(ONE, { runtime: "python3.11" });
    assert.equal(env.usage.runtime, "python3.11");
    assert.equal(env.decision?.runtime, "python3.11");
    const e = await rejects(client().execute(ONE, { runtime: "python3.13" }), execgate.PolicyDenied); // demo: python3.11 only
    assert.ok(e.reasons.some((r) => r.includes("python3.13")), String(e.reasons));
  });

  test("execute takes secrets: the tool gets the value, what comes back is masked", async () => {
    const src = "def run(args, context):\n    print(context.secrets['DEMO_KEY'])\n    return context.secrets['DEMO_KEY'] == args\n";
    const env = await client().execute(src, { args: DEMO_SECRET, secrets: ["DEMO_KEY"] });
    assert.equal(env.result, true);
    assert.equal(env.stdout, "***\n");
    assert.deepEqual(env.decision?.secrets, ["DEMO_KEY"]);
    assert.ok(!JSON.stringify(env).includes(DEMO_SECRET));
    const e = await rejects(client().execute(src, { secrets: ["OTHER"] }), execgate.PolicyDenied);
    assert.deepEqual(e.reasons, ['secret "OTHER" is not granted to tenant "demo"']);
  });

  test("an option the method does not take is a TypeError naming it, and nothing is sent", async () => {
    let sent = 0;
    const c = client("demo", { fetch: (i, init) => { sent++; return fetch(i, init); } });
    await assert.rejects(c.execute(ONE, { isolaton: "jail" } as execgate.ExecuteOptions), /execute\(\): unknown option "isolaton"/);
    await assert.rejects(c.validate(ONE, { lang: "python" } as execgate.ValidateOptions), /validate\(\): unknown option "lang"/);
    assert.equal(sent, 0);
  });
});

describe("each refusal throws its class with the envelope", () => {
  const rows: Array<[string, number, () => Promise<unknown>, new (...a: any[]) => execgate.ExecgateError]> = [
    ["BadRequest", 400, () => client().execute(ONE, { mode: "sideways" as "run" }), execgate.BadRequest],
    ["PayloadTooLarge", 413, () => client().execute("#".repeat(20000)), execgate.PayloadTooLarge],
    ["PolicyDenied", 403, () => client().execute(ONE, { network_access: "host" }), execgate.PolicyDenied],
    ["Unauthenticated", 401, () => new Client({ baseUrl: gw.url, token: "garbage" }).execute(ONE), execgate.Unauthenticated],
    ["Forbidden", 403, () => new Client({ baseUrl: gw.url, token: gw.token("demo", "auditor") }).execute(ONE), execgate.Forbidden],
  ];
  for (const [name, status, call, cls] of rows) {
    test(name, async () => {
      const e = await rejects(call(), cls);
      assert.ok(e instanceof execgate.RequestError);
      assert.equal(e.status, status);
      assert.equal(e.errorType, name);
      assert.equal(e.envelope?.error?.type, name);
      if (name === "PolicyDenied") assert.ok(e.reasons.length > 0);
    });
  }

  test("BudgetExhausted is not retried", async () => {
    const sleeps: number[] = [];
    const e = await rejects(client("broke", { sleep: async (s) => { sleeps.push(s); } }).execute(ONE), execgate.BudgetExhausted);
    assert.equal(e.status, 429);
    assert.ok((e.retryAfter ?? 0) > 30);
    assert.deepEqual(sleeps, []);
  });
});

describe("each run error throws its class; check false returns it", () => {
  const rows: Array<[string, string, execgate.ExecuteOptions, new (...a: any[]) => execgate.ExecgateError]> = [
    ["ToolError", "def run(args, context):\n    raise ValueError('nope')\n", {}, execgate.ToolError],
    ["InvalidSource", "def run(:\n", {}, execgate.InvalidSource],
    ["EntrypointNotFound", ONE, { entrypoint: "main" }, execgate.EntrypointNotFound],
    ["InvalidResult", "def run(args, context):\n    return object()\n", {}, execgate.InvalidResult],
    ["Timeout", "import time\n\ndef run(args, context):\n    time.sleep(10)\n", { limits: { timeout_ms: 500 } }, execgate.Timeout],
  ];
  for (const [name, source, opts, cls] of rows) {
    test(name, async () => {
      const e = await rejects(client().execute(source, opts), cls);
      assert.ok(e instanceof execgate.RunError);
      assert.equal(e.status, 200);
      assert.equal(e.envelope?.error?.type, name);
      const env = await client().execute(source, { ...opts, check: false });
      assert.equal(env.status, "error");
      assert.equal(env.error?.type, name);
    });
  }
});

describe("retries", () => {
  test("a 429 waits for Retry-After and retries with the same execution_id", async () => {
    // Tenant limited: 60 a minute, burst 1.
    await client("limited", { maxRetries: 0 }).execute(ONE); // takes the burst
    const e = await rejects(client("limited", { maxRetries: 0 }).execute(ONE), execgate.QuotaExceeded);
    assert.equal(e.status, 429);
    assert.equal(e.retryAfter, 1);

    const ids: string[] = [];
    const sleeps: number[] = [];
    const c = client("limited", {
      fetch: (input, init) => { ids.push(JSON.parse(String(init?.body)).execution_id); return fetch(input, init); },
      sleep: async (s) => { sleeps.push(s); await new Promise((r) => setTimeout(r, s * 1000)); },
    });
    const start = Date.now();
    const env = await c.execute(ONE);
    assert.equal(env.result, 1);
    assert.equal(sleeps[0], 1, `sleeps ${sleeps}`);
    assert.ok(Date.now() - start >= 1000);
    assert.equal(ids.length, sleeps.length + 1);
    assert.equal(new Set(ids).size, 1, "a retry changed the execution_id");
  });

  test("the same execution_id returns the first result", async () => {
    const first = await client().execute(RANDOM, { execution_id: "ts-idem-1" });
    const again = await client().execute(RANDOM, { execution_id: "ts-idem-1" });
    assert.equal(again.result, first.result);
    assert.equal(again.trace_id, first.trace_id);
  });

  test("a network error is retried with the same execution_id and runs once", async () => {
    const ids: string[] = [];
    let calls = 0;
    const c = client("demo", {
      backoff: 0.01,
      // The first attempt reaches the gateway (the tool runs) but its answer is "lost".
      fetch: async (input, init) => {
        ids.push(JSON.parse(String(init?.body)).execution_id);
        const res = await fetch(input, init);
        if (calls++ === 0) { await res.text(); throw new TypeError("connection reset"); }
        return res;
      },
    });
    const env = await c.execute(RANDOM);
    assert.equal(calls, 2);
    assert.equal(new Set(ids).size, 1);
    const ran = gw.audit().filter((r) => r.execution_id === env.execution_id && r.usage.wall_ms > 0);
    assert.equal(ran.length, 1, `the tool ran ${ran.length} times`);
  });

  test("a rotating token is fetched again after a 401", async () => {
    const tokens = ["garbage", gw.token()];
    let calls = 0;
    const c = new Client({ baseUrl: gw.url, token: () => tokens[calls++] });
    assert.equal((await c.execute(ONE)).result, 1);
    assert.equal(calls, 2);
  });

  test("onRequest sees every request's headers (the trace context hook)", async () => {
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const env = await client("demo", { onRequest: (h) => h.set("traceparent", traceparent) }).execute(ONE);
    assert.equal(env.trace_id, "0af7651916cd43dd8448eb211c80319c");
  });
});

test("every ErrorType of /openapi.json has a class", async () => {
  const doc = await (await fetch(gw.url + "/openapi.json")).json();
  for (const t of doc.components.schemas.ErrorType.enum as string[]) {
    assert.ok(t in execgate.ERRORS, `no class for ${t}`);
  }
});
