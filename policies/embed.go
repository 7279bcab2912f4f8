// Package policies holds execgate's default Rego policies and their tests.
//
// The .rego files here are the platform baseline (DESIGN §6): the decision
// entry point data.execgate.main.decision and one module per concern
// (access, network, limits, egress, packages, tools) with the platform's
// defaults and maxima in platform.rego. Each module has a _test.rego next to
// it; `opa test policies/` and `execgate policy test` both run them.
//
// The policy package compiles FS; it skips the _test.rego files when serving.
//
// How to add a concern (say, "languages"):
//  1. Write languages.rego in package execgate.languages with a
//     `violations contains reason if { … }` set (and whatever values the
//     decision needs), reading constants from platform.rego.
//  2. In main.rego, import it and add languages.violations to baseline.
//  3. Write languages_test.rego; `execgate policy test` must stay at ≥ 90 %
//     coverage (policy.TestRegoTestsPassWithCoverage enforces it).
//  4. If the decision gains a field, add it to policy.Decision and to
//     decodeDecision's checks.
//
// Performance: the policy engine evaluates every rule that depends on
// input.tenant alone (and constants) once per tenant, not per request (see
// policy.tenantOnlyRefs). Keep tenant-derived values (normalised lists,
// parsed patterns, tenant data checks) in rules of their own, apart from
// rules that read input.request or input.subject, so they qualify.
//
// Extension modules (policy.dirs, bundles) cannot do this: they may only add
// `deny` rules to package execgate.main, with helpers in their own package.
package policies

import "embed"

// FS holds every .rego file of this directory (modules and tests).
//
//go:embed *.rego
var FS embed.FS
