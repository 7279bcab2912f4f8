// Files in, artifacts out, against a real gateway (server.ts): files and
// stdin reach the tool, the envelope lists typed artifacts, artifact()
// fetches one (bounded), saveArtifacts() writes them all, safely.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, lstatSync, rmSync, symlinkSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as execgate from "../src/index.js";
import { Client, type Envelope } from "../src/index.js";
import { startGateway, type Gateway } from "./server.js";

// The tool (clients/testdata): report.csv inline, big.bin fetched, dot.png.
const TOOL = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "testdata", "artifacts_tool.py"), "utf8");
const BIG = new Uint8Array(100000).map((_, i) => i % 250);

let gw: Gateway;
let run: Envelope;
before(async () => {
  gw = await startGateway();
  run = await client().execute(TOOL, { files: [{ path: "data/in.csv", content: "a,b\n1,2\n" }], stdin: "from stdin\n" });
});
// The directories tmp() made are removed at the end, as pytest's tmp_path
// and Go's t.TempDir are.
const made: string[] = [];
after(async () => {
  await gw?.stop();
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

const client = (tenant = "demo") => new Client({ baseUrl: gw.url, token: gw.token(tenant) });
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "execgate-ts-artifacts-"));
  made.push(d);
  return d;
};

async function rejects(p: Promise<unknown>, check: (e: any) => boolean): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.ok(check(e), `got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    return;
  }
  assert.fail("expected a rejection");
}

describe("artifacts", () => {
  test("files and stdin reach the tool and the artifacts are listed, small ones inline", () => {
    assert.equal(run.result, 2);
    const arts = run.artifacts ?? [];
    assert.deepEqual(arts.map((a) => a.name), ["big.bin", "dot.png", "report.csv"]);
    const [big, dot, report] = arts;
    assert.equal(report.mime, "text/csv");
    assert.equal(new TextDecoder().decode(execgate.artifactData(report)), "2,from stdin\n");
    assert.equal(report.sha256, createHash("sha256").update("2,from stdin\n").digest("hex"));
    assert.equal(big.bytes, 100000);
    assert.equal(execgate.artifactData(big), undefined); // over the inline cap
    assert.equal(dot.mime, "image/png");
  });

  test("artifact() fetches one, bounded by maxBytes; another tenant's is NotFound", async () => {
    assert.deepEqual(await client().artifact(run.execution_id, "big.bin"), BIG);
    await rejects(client().artifact(run.execution_id, "big.bin", { maxBytes: 1000 }), (e) => e.errorType === "PayloadTooLarge");
    await rejects(client().artifact(run.execution_id, "nope.txt"), (e) => e instanceof execgate.NotFound);
    await rejects(client().artifact(run.execution_id, "../report.csv"), (e) => e instanceof TypeError);
    await rejects(client("limited").artifact(run.execution_id, "report.csv"), (e) => e instanceof execgate.NotFound);
  });

  test("saveArtifacts() writes every one, inline or fetched", async () => {
    const dir = join(tmp(), "new", "dir");
    const paths = await client().saveArtifacts(run, dir);
    assert.deepEqual(paths.map((p) => p.split("/").pop()), ["big.bin", "dot.png", "report.csv"]);
    assert.deepEqual(new Uint8Array(readFileSync(join(dir, "big.bin"))), BIG);
    assert.equal(readFileSync(join(dir, "report.csv"), "utf8"), "2,from stdin\n");
    assert.deepEqual(readdirSync(dir).sort(), ["big.bin", "dot.png", "report.csv"]); // no temporary file left
  });

  test("saveArtifacts() never writes through a link, and replaces a regular file whole", async () => {
    const base = tmp();
    const secret = join(base, "secret");
    writeFileSync(secret, "keep");
    const out = join(base, "out");
    mkdirSync(out);
    symlinkSync(secret, join(out, "report.csv"));
    writeFileSync(join(out, "big.bin"), "an older big.bin");
    await rejects(client().saveArtifacts(run, out), (e) => e.code === "EEXIST" && /report\.csv is there already, a symbolic link: left alone/.test(e.message));
    assert.equal(readFileSync(secret, "utf8"), "keep");
    assert.ok(lstatSync(join(out, "report.csv")).isSymbolicLink());
    assert.deepEqual(new Uint8Array(readFileSync(join(out, "big.bin"))), BIG);
  });

  test("saveArtifacts() refuses unsafe names before writing anything, and bytes that are not the listed ones", async () => {
    const base = tmp();
    const x = { bytes: 1, mime: "text/plain", sha256: createHash("sha256").update("x").digest("hex"), base64: "eA==" };
    for (const bad of ["../escape", "a/b", "..", "back\\slash", "bell\x07", ""]) {
      const env = { ...run, artifacts: [{ name: "ok.txt", ...x }, { name: bad, ...x }] } as Envelope;
      await rejects(client().saveArtifacts(env, join(base, "out")), (e) => e instanceof TypeError);
      assert.ok(!existsSync(join(base, "out", "ok.txt")));
    }
    assert.ok(!existsSync(join(base, "escape")));
    const lying = { ...run, artifacts: [{ name: "a.txt", ...x, sha256: "0".repeat(64) }] } as Envelope;
    await rejects(client().saveArtifacts(lying, join(base, "out")), (e) => e instanceof execgate.ArtifactMismatch);
    assert.deepEqual(readdirSync(join(base, "out")), []);
  });
});
