// Package npm makes the npm package environments of JavaScript and
// TypeScript runs: it reads requirements (exact versions, "left-pad@1.3.0"),
// resolves their whole dependency closure against an npm registry into a
// lock (every package pinned with the sha512 integrity the registry
// publishes), and installs a lock into a directory the jail's Deno reads
// (see Install for the layout): each tarball downloaded by this package's
// own code, checked against the lock's integrity and extracted with paths
// kept inside the package, links skipped and sizes and file counts capped.
// No package code runs: no install scripts (there is nothing here that
// could run one), no bin links, no native builds.
//
// Resolution follows npm's rules where they matter for what gets
// installed: node-semver ranges (testdata/semver.json is node-semver's own
// answers), the "latest" tag preferred when a range admits it, deprecated
// versions avoided, versions already chosen reused, npm: aliases followed,
// peer dependencies installed unless optional, optional dependencies only
// for this platform and skipped when they cannot be installed. git, file,
// link and URL dependencies are refused.
//
// It imports nothing of execgate's: package environments names, caches and
// evicts the environments, and hands them to the runner.
package npm
