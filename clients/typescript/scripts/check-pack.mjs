// Checks what `npm pack` would publish (scripts/test.sh runs it after the
// build): every module of dist/ as ESM .js with its .d.ts, the README and
// package.json, and nothing else (no sources, tests or build output).
import { execFileSync } from "node:child_process";

const [pack] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { encoding: "utf8" }));
const files = pack.files.map((f) => f.path).sort();
const problems = [];
const js = files.filter((f) => /^dist\/[^/]+\.js$/.test(f));
for (const want of ["dist/index.js", "dist/index.d.ts", "dist/client.js", "dist/events.js", "README.md", "package.json"]) {
  if (!files.includes(want)) problems.push(`missing ${want}`);
}
for (const f of js) if (!files.includes(f.replace(/\.js$/, ".d.ts"))) problems.push(`${f} has no .d.ts`);
for (const f of files) {
  if (!/^dist\/[^/]+\.(js|d\.ts)$/.test(f) && f !== "README.md" && f !== "package.json") problems.push(`unexpected ${f}`);
}
if (problems.length) {
  console.error(`npm pack --dry-run of ${pack.id}:\n  ${problems.join("\n  ")}\nfiles: ${files.join(", ")}`);
  process.exit(1);
}
console.log(`typescript client: ${pack.filename} would hold ${files.length} files (${js.length} modules with .d.ts), ${pack.size} bytes`);
