// execgate: the TypeScript client of the execgate HTTP API.
//
//   import { Client } from "execgate";
//   const c = new Client(); // $EXECGATE_URL, $EXECGATE_TOKEN
//   console.log((await c.execute("def run(args, context):\n    return 42\n")).result);
//
//   const { execution_id } = await c.submit(source);       // async run
//   for await (const ev of c.events(execution_id)) console.log(ev);  // live output, resumed after a drop

export * from "./client.js";
export * from "./errors.js";
export type { ExecutionEvent, LogLevel } from "./events.js";
export type { components, paths } from "./schema.js";
