// execgate: the TypeScript client of the execgate HTTP API.
//
//   import { Client } from "execgate";
//   const c = new Client(); // $EXECGATE_URL, $EXECGATE_TOKEN
//   console.log((await c.execute("def run(args, context):\n    return 42\n")).result);

export * from "./client.js";
export * from "./errors.js";
export type { components, paths } from "./schema.js";
