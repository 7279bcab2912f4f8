#!/usr/bin/python3
"""Reads `go test -json` on stdin and prints what plain `go test` would print
(each package's ok/FAIL line, the output of failed tests and of failed
builds), then one closing line:

    tests: N passed, N failed, N skipped

Under CI=true a skipped test in a package that proves containment (the
containment suite, the sandbox, the wired app, the CLI that drives the
sandbox) is a failure: a host that cannot run them must not turn CI green.
The skipped tests are listed with their reasons either way.

With --failures FILE it also writes each failed test's name and the last
lines of its output there (nothing when all passed), so that scripts/test.sh
can repeat them at the very end of a long CI log, where they are read.

Exit status: 1 when any test or build failed, or a guarded test skipped
under CI=true; else 0. Standard library only (run with /usr/bin/python3).
"""

import json
import os
import sys

MODULE = "github.com/execgate/execgate/"
# Packages whose tests must all run in CI (prefixes, relative to MODULE).
# How many of a failed test's last output lines the failures file keeps.
FAILURE_TAIL = 25
GUARDED = ("containment", "sandbox", "app", "cmd/execgate", "rootfs", "egress", "environments")


def guarded(pkg):
    rel = pkg[len(MODULE):] if pkg.startswith(MODULE) else pkg
    return any(rel == g or rel.startswith(g + "/") for g in GUARDED)


def failures_path(argv):
    if len(argv) == 3 and argv[1] == "--failures":
        return argv[2]
    if len(argv) != 1:
        sys.exit("usage: gotest-report.py [--failures FILE] < go-test-json")
    return None


def main():
    out = failures_path(sys.argv)
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    failures = []         # (pkg, test, [last lines])
    outputs = {}          # (pkg, test) -> [lines]; test "" is the package
    counts = {"pass": 0, "fail": 0, "skip": 0}
    skipped = []          # (pkg, test, reason)
    failed_build = False
    failed_pkgs = []
    for raw in sys.stdin:
        try:
            ev = json.loads(raw)
        except ValueError:
            sys.stdout.write(raw)  # not JSON: go itself complaining
            continue
        action = ev.get("Action")
        pkg = ev.get("Package") or ev.get("ImportPath") or ""
        test = ev.get("Test", "")
        if action == "build-output":
            sys.stdout.write(ev.get("Output", ""))
            continue
        if action == "build-fail":
            failed_build = True
            continue
        key = (pkg, test)
        if action == "output":
            outputs.setdefault(key, []).append(ev.get("Output", ""))
            continue
        if action not in ("pass", "fail", "skip"):
            continue
        lines = outputs.pop(key, [])
        if test:
            counts[action] += 1
            if action == "fail":
                sys.stdout.write("".join(lines))
                failures.append((pkg, test, lines[-FAILURE_TAIL:]))
            elif action == "skip":
                reason = "".join(
                    l.strip() + " " for l in lines
                    if not l.startswith(("=== ", "--- SKIP"))).strip()
                skipped.append((pkg, test, reason))
            continue
        # Package end: print what non-verbose go test prints.
        if action == "fail":
            failed_pkgs.append(pkg)
            sys.stdout.write("".join(
                l for l in lines if not l.startswith(("=== ", "--- PASS", "PASS"))))
            if not any(l.startswith("FAIL") for l in lines):
                print("FAIL\t%s" % pkg)
            if not any(f[0] == pkg for f in failures):
                # No test failed: the package itself did (a panic, a
                # timeout, TestMain).
                failures.append((pkg, "", lines[-FAILURE_TAIL:]))
        else:
            tail = [l for l in lines if l.startswith(("ok ", "ok\t", "?"))]
            sys.stdout.write("".join(tail) or "%s\t%s\n" % (
                "ok" if action == "pass" else "?", pkg))

    bad_skips = [s for s in skipped if ci and guarded(s[0])]
    if skipped:
        print("\nskipped tests:")
        for pkg, test, reason in skipped:
            mark = "  NOT ALLOWED IN CI" if (ci and guarded(pkg)) else ""
            print("  %s %s: %s%s" % (pkg[len(MODULE):] or pkg, test, reason, mark))
    if bad_skips:
        print("\nCI=true: %d test(s) of the containment/sandbox/app packages "
              "skipped; CI must prove containment, not skip it" % len(bad_skips))
    print("\ntests: %d passed, %d failed, %d skipped"
          % (counts["pass"], counts["fail"], counts["skip"]))
    if out:
        with open(out, "w") as f:
            if failed_build:
                f.write("a package did not build (its errors are above)\n")
            for pkg, test, lines in failures:
                f.write("--- FAIL %s %s\n" % (pkg[len(MODULE):] or pkg, test or "(the package)"))
                f.write("".join("    " + l if l.strip() else l for l in lines))
            for pkg, test, reason in bad_skips:
                f.write("--- SKIP not allowed in CI: %s %s: %s\n"
                        % (pkg[len(MODULE):] or pkg, test, reason))
    if counts["fail"] or failed_pkgs or failed_build or bad_skips:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
