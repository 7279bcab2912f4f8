// Every request field of gateway/openapi.yaml is an option of the client.
//
// Reads the OpenAPI document itself and compares each request body schema's
// properties with REQUEST_FIELDS, from which the client builds its request
// bodies (and which the compiler holds to the generated schema types). A
// field the document gains and the client lacks fails here; so does a field
// the document does not have.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { load } from "js-yaml";

import { REQUEST_FIELDS } from "../src/index.js";

// build/test/drift.test.js → the repository root.
const DOC = join(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", ".."), "gateway", "openapi.yaml");

// operationId → the method sending its request body.
const METHODS: Record<string, keyof typeof REQUEST_FIELDS> = {
  execute: "execute", submitExecution: "submit", validate: "validate", prepare: "prepare",
};
// Operations with a body that are not the client's (JSON-RPC; admin routes).
const NOT_OURS = new Set(["mcp"]);

interface Operation {
  operationId: string;
  tags?: string[];
  requestBody?: { content: Record<string, { schema: { $ref?: string } }> };
}
interface Doc {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
}

function requestSchemas(doc: Doc): Map<string, string> {
  const out = new Map<string, string>();
  for (const item of Object.values(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (method === "parameters" || !op.requestBody || op.tags?.includes("admin") || NOT_OURS.has(op.operationId)) continue;
      const ref = op.requestBody.content["application/json"]?.schema.$ref ?? "";
      out.set(op.operationId, ref.split("/").pop() ?? "");
    }
  }
  return out;
}

const doc = load(readFileSync(DOC, "utf8")) as Doc;
const ops = requestSchemas(doc);

test("every route with a request body has a client method", () => {
  assert.deepEqual([...ops.keys()].sort(), Object.keys(METHODS).sort());
});

for (const [op, method] of Object.entries(METHODS)) {
  test(`${method}() takes every field of ${op}'s request body and no other`, () => {
    const schema = doc.components.schemas[ops.get(op) ?? ""];
    assert.ok(schema?.properties, `no schema for ${op}`);
    const fields = Object.keys(schema.properties).sort();
    const listed: readonly string[] = REQUEST_FIELDS[method];
    assert.deepEqual(fields.filter((f) => !listed.includes(f)), [], `${method}() lacks these fields`);
    assert.deepEqual(listed.filter((f) => !fields.includes(f)), [], `${method}() takes fields the document lacks`);
  });
}
