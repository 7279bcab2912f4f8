// Generates semver.json from node-semver (npm's own): node semver_gen.js [path/to/semver] > semver.json
const s = require(process.argv[2] || "/usr/lib/node_modules/npm/node_modules/semver");
const ranges = ["", "*", "x", "1", "1.x", "1.2", "1.2.x", "1.2.3", "=1.2.3", "v1.2.3", ">1.2.3", ">=1.2.3", "<1.2.3", "<=1.2.3", ">1.2", ">1", "<1.2", "<=1.2", "<1", "<=1", ">=1.2", ">=1",
  "^1.2.3", "^0.2.3", "^0.0.3", "^1.2", "^0.2", "^0.0", "^1", "^0", "^1.x", "^0.x", "^0.1.x", "^0.0.x", "^1.2.3-beta.2", "^0.0.3-beta",
  "~1.2.3", "~1.2", "~1", "~0.2.3", "~0", "~1.2.3-beta.2", "~>1.2.3",
  "1.2.3 - 2.3.4", "1.2 - 2.3.4", "1.2.3 - 2.3", "1.2.3 - 2", "* - 2", "1 - *",
  ">=1.2.3 <2.0.0", ">= 1.2.3 < 2", "1.2.7 || >=1.2.9 <2.0.0", "^1.0.0 || ^2.0.0", ">=1.0.0-rc.1 <1.0.0", "1.0.0-rc.1", ">1.2.3-alpha.3", "<2.0.0-0", ">*", "<*", ">=*", "<=*",
  "^2.0.0-alpha", "1.x || 3.x", "~1.2.3 || ^3.1"];
const versions = ["0.0.0", "0.0.1", "0.0.3", "0.0.4", "0.0.3-beta", "0.0.3-beta.2", "0.1.0", "0.1.5", "0.2.0", "0.2.3", "0.2.9", "0.3.0", "1.0.0-rc.1", "1.0.0-rc.2", "1.0.0", "1.1.0", "1.2.0", "1.2.2", "1.2.3-alpha.3", "1.2.3-alpha.7", "1.2.3-beta.2", "1.2.3-beta.3", "1.2.3", "1.2.4", "1.2.7", "1.2.8", "1.2.9", "1.3.0-alpha", "1.3.0", "1.9.9", "2.0.0-0", "2.0.0-alpha", "2.0.0-beta.1", "2.0.0", "2.3.4", "2.3.5", "2.4.0", "2.9.9", "3.0.0", "3.1.0", "3.2.0", "3.4.5", "4.0.0", "10.20.30"];
const out = [];
for (const r of ranges) {
  out.push({range: r, in: versions.filter(v => s.satisfies(v, r))});
}
console.log(JSON.stringify({generator: "node-semver " + require((process.argv[2] || "/usr/lib/node_modules/npm/node_modules/semver") + "/package.json").version + " (testdata/semver_gen.js)", versions, ranges: out}, null, 1));
