// Package debian reads the Debian package archive the way apt does, with
// nothing of the host's apt state: it fetches a suite's InRelease, checks
// its OpenPGP signature against the Debian archive keyrings, fetches the
// suite's Packages index and checks it against the SHA256 the signed
// Release lists, resolves a set of packages with their dependencies, and
// downloads .debs into a content-addressed cache (each checked against the
// SHA256 the signed index gave). Extract unpacks a .deb's data with
// dpkg-deb into a merged-/usr tree without running maintainer scripts.
//
// The chain of trust: keyring → InRelease signature → Packages.gz SHA256 →
// each .deb's SHA256. package rootfs records the last link in the runtime
// lock (rootfs/runtimes.lock.json), so a build on any host needs only the
// lock and an archive (or the cache) to get byte-identical packages.
package debian
