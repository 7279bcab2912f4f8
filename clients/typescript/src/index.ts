// execgate: the TypeScript client of the execgate HTTP API.
//
//   import { Client } from "execgate";
//   const c = new Client(); // $EXECGATE_URL, $EXECGATE_TOKEN
//   console.log((await c.execute("def run(args, context):\n    return 42\n")).result);
//
//   const { execution_id } = await c.submit(source);       // async run
//   for await (const ev of c.events(execution_id)) console.log(ev);  // live output, resumed after a drop
//
//   const env = await c.execute(chartSource, { files: [{ path: "in.csv", content: csv }] });
//   await c.saveArtifacts(env, "charts");                   // every artifact, written safely (Node)

export * from "./client.js";
export { ArtifactMismatch, artifactData, checkArtifactName, DEFAULT_MAX_ARTIFACT_BYTES, type Artifact } from "./artifacts.js";
export * from "./errors.js";
export type { ExecutionEvent, LogLevel } from "./events.js";
export type { components, paths } from "./schema.js";
