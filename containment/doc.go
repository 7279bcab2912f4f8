// Package containment is the containment suite: integration tests that run
// real attacks as tools through the real sandbox (nsjail, the built rootfs,
// seccomp, cgroups) and assert each one fails in the precise way
// /work/shared/CONTAINMENT.md (items 1–27) requires, with nothing left
// behind on the host.
//
// It has no non-test code. The tests run with plain `go test ./...`; they
// skip only where the host cannot jail at all (not root, no nsjail), via
// internal/testenv. Each tool's source is in testdata/.
//
// How to add a case:
//  1. Write the attack as a tool in testdata/ that reports what it saw
//     (return values, errnos) rather than judging itself.
//  2. Add a test (or a table row) that runs it with runTool and asserts the
//     exact outcome: the envelope's error type, or the errno the kernel gave.
//  3. If the sandbox does not hold the line, keep the test failing and tell
//     the sandbox owner which item fails and why; never weaken it.
package containment
