// Starts a real `bin/execgate serve` for the suite, as the Python suite's
// conftest.py does: a temp state dir, clients/testdata/execgate.yaml
// (tenants demo, limited, broke; packages from clients/testdata/wheels;
// tenant demo's MCP tool server "self" is the gateway's own /mcp), the real
// nsjail sandbox. Tokens come from
// `execgate token`. EXECGATE_BIN and EXECGATE_TEST_RUNTIMES override the
// binary and the shared runtimes dir (python3.11 is built there once).
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, openSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// build/test/server.js → the repository root.
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

/** Tenant demo's brokered secret DEMO_KEY (clients/testdata/execgate.yaml). */
export const DEMO_SECRET = "clients-demo-secret-3f9a";

export interface Gateway {
  url: string;
  token(tenant?: string, ...roles: string[]): string;
  audit(): Array<Record<string, any>>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

export async function startGateway(): Promise<Gateway> {
  const bin = process.env.EXECGATE_BIN ?? join(REPO, "bin", "execgate");
  if (!existsSync(bin)) throw new Error(`${bin} is missing (go build -o bin/execgate ./cmd/execgate)`);
  const runtimes = process.env.EXECGATE_TEST_RUNTIMES ?? join(REPO, ".tools", "cache", "clients-runtimes");
  const state = mkdtempSync(join(tmpdir(), "execgate-tsclient-"));
  chmodSync(state, 0o711); // the jail user reaches the run dirs below it
  writeFileSync(join(state, "dev.key"), randomBytes(32).toString("hex"), { mode: 0o600 });
  const port = await freePort();
  const config = join(state, "execgate.yaml");
  const testdata = join(REPO, "clients", "testdata");
  writeFileSync(config, readFileSync(join(testdata, "execgate.yaml"), "utf8")
    .replaceAll("{{PORT}}", String(port)).replaceAll("{{STATE}}", state).replaceAll("{{RUNTIMES}}", runtimes)
    .replaceAll("{{TESTDATA}}", testdata));
  // The header of tenant demo's tool server "self" (the gateway's own /mcp), read when serve starts.
  const selfToken = execFileSync(bin, ["token", "--config", config, "--tenant", "demo", "--role", "executor"], { encoding: "utf8" }).trim();
  writeFileSync(join(state, "self-mcp.token"), "Bearer " + selfToken, { mode: 0o600 });
  const log = openSync(join(state, "serve.log"), "w");
  const proc: ChildProcess = spawn(bin, ["serve", "--config", config], {
    stdio: ["ignore", log, log],
    env: { ...process.env, PATH: `${join(REPO, ".tools", "bin")}:${process.env.PATH ?? ""}`, TOOL_SECRET_CLIENTS_DEMO: DEMO_SECRET },
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 300_000; // the first start builds the rootfs
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`execgate serve exited ${proc.exitCode}:\n${readFileSync(join(state, "serve.log"), "utf8").slice(-4000)}`);
    try {
      if ((await fetch(url + "/readyz")).status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error("execgate serve not ready after 300 s");
    await new Promise((r) => setTimeout(r, 200));
  }
  const tokens = new Map<string, string>();
  const gw: Gateway = {
    url,
    token(tenant = "demo", ...roles: string[]) {
      const key = [tenant, ...roles].join(" ");
      if (!tokens.has(key)) {
        const args = ["token", "--config", config, "--tenant", tenant];
        for (const r of roles.length ? roles : ["executor"]) args.push("--role", r);
        tokens.set(key, execFileSync(bin, args, { encoding: "utf8" }).trim());
      }
      return tokens.get(key)!;
    },
    audit() {
      const p = join(state, "audit.jsonl");
      if (!existsSync(p)) return [];
      return readFileSync(p, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
    },
    async stop() {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await exited;
      rmSync(state, { recursive: true, force: true });
    },
  };
  await spendBudget(gw, "broke");
  return gw;
}

// spendBudget burns tenant's daily CPU budget: each run gets what is left
// of it, until nothing is and runs are 429 BudgetExhausted.
async function spendBudget(gw: Gateway, tenant: string): Promise<void> {
  const burn = JSON.stringify({ source: "def run(args, context):\n    while True:\n        pass\n", limits: { timeout_ms: 30000 } });
  for (let i = 0; i < 8; i++) {
    const r = await fetch(gw.url + "/v1/execute", {
      method: "POST", body: burn,
      headers: { Authorization: `Bearer ${gw.token(tenant)}`, "Content-Type": "application/json" },
    });
    await r.text();
    if (r.status === 429) return;
  }
  throw new Error(`${tenant}'s CPU budget is not spent after 8 runs`);
}
