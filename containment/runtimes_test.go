package containment

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
)

// 39. Every Python runtime: the suite's tests run on the default runtime
// (python3.11, Debian bookworm) as the top-level tests they are, and again,
// every one of them at both levels, on each other runtime of the lock
// (python3.13, Debian trixie: another interpreter, C library, OpenSSL and
// zlib) as the subtests of TestEveryRuntime: the same escapes must fail
// the same way whatever the tree. A test picks its runtime from its name
// (runtimeOf), so the tests themselves are written once.

// everyRuntimePrefix starts the names of TestEveryRuntime's subtests.
const everyRuntimePrefix = "TestEveryRuntime/"

// runtimeOf is the runtime t runs on: the one TestEveryRuntime names, or
// the default.
func runtimeOf(t *testing.T) string {
	if rest, ok := strings.CutPrefix(t.Name(), everyRuntimePrefix); ok {
		rt, _, _ := strings.Cut(rest, "/")
		return rt
	}
	return limits.DefaultRuntime
}

// sandboxConfig is testenv.SandboxConfig for t's runtime.
func sandboxConfig(t *testing.T) sandbox.Config {
	t.Helper()
	cfg := testenv.SandboxConfig(t)
	if rt := runtimeOf(t); rt != limits.DefaultRuntime {
		cfg.RootfsDir = testenv.Runtime(t, rt)
		cfg.Runtimes = []string{rt}
	}
	return cfg
}

// cgroupParent is the parent cgroup of t's runs named after group: the
// same test on another runtime runs beside it and checks that nothing is
// left below its own.
func cgroupParent(t *testing.T, group string) string {
	p := cgroupPrefix + "-" + group
	if rt := runtimeOf(t); rt != limits.DefaultRuntime {
		p += "-" + strings.ReplaceAll(rt, ".", "")
	}
	return p
}

// pythonSuite is every test that runs Python tools: the ones
// TestEveryRuntime runs again on each other runtime.
// TestTheSuiteRunsOnEveryRuntime keeps it complete.
var pythonSuite = []struct {
	name string
	fn   func(*testing.T)
}{
	{"TestBusyLoopPastTheWallLimitIsATimeoutAndLeavesNoProcess", TestBusyLoopPastTheWallLimitIsATimeoutAndLeavesNoProcess},
	{"TestCPUBurnPastTheCPULimitIsCPULimit", TestCPUBurnPastTheCPULimitIsCPULimit},
	{"TestMemoryBombIsMemoryLimit", TestMemoryBombIsMemoryLimit},
	{"TestProcessCreationPastThePidsLimitFailsWithEAGAIN", TestProcessCreationPastThePidsLimitFailsWithEAGAIN},
	{"TestSharedMemoryCannotExceedTheCaps", TestSharedMemoryCannotExceedTheCaps},
	{"TestInterpreterCrashIsACleanErrorAndTheRunnerSurvives", TestInterpreterCrashIsACleanErrorAndTheRunnerSurvives},
	{"TestOutputFloodIsTruncatedAndMemoryStaysBounded", TestOutputFloodIsTruncatedAndMemoryStaysBounded},
	{"TestOutcomesTheToolForgesOnTheResultChannel", TestOutcomesTheToolForgesOnTheResultChannel},
	{"TestSeccompDeniesDangerousSyscalls", TestSeccompDeniesDangerousSyscalls},
	{"TestSocketFamiliesOutsideTheNamespaceAreDenied", TestSocketFamiliesOutsideTheNamespaceAreDenied},
	{"TestPtraceAndProcMemOfOtherProcessesAreDenied", TestPtraceAndProcMemOfOtherProcessesAreDenied},
	{"TestNoPrivilegesAndNoWayToGainThem", TestNoPrivilegesAndNoWayToGainThem},
	{"TestNestedNamespacesCannotBeCreatedOrJoined", TestNestedNamespacesCannotBeCreatedOrJoined},
	{"TestCgroupfsIsNotReachable", TestCgroupfsIsNotReachable},
	{"TestResourceLimitsCannotBeRaised", TestResourceLimitsCannotBeRaised},
	{"TestSystemPathsAreReadOnly", TestSystemPathsAreReadOnly},
	{"TestScratchSpaceIsBounded", TestScratchSpaceIsBounded},
	{"TestSymlinksCannotReachHostFiles", TestSymlinksCannotReachHostFiles},
	{"TestNothingSurvivesBetweenRuns", TestNothingSurvivesBetweenRuns},
	{"TestHostPathsAreAbsent", TestHostPathsAreAbsent},
	{"TestDevIsMinimal", TestDevIsMinimal},
	{"TestProcHygiene", TestProcHygiene},
	{"TestEnvironmentDescriptorsAndIDs", TestEnvironmentDescriptorsAndIDs},
	{"TestGatewaySecretIsNotFindableInTheJail", TestGatewaySecretIsNotFindableInTheJail},
	{"TestNetworkNoneReachesNothing", TestNetworkNoneReachesNothing},
	{"TestNetworkProxyAllowsOnlyTheAllowList", TestNetworkProxyAllowsOnlyTheAllowList},
	{"TestPerUserKernelLimitsArePerJail", TestPerUserKernelLimitsArePerJail},
	{"TestLevelProcessKillsEveryEscapeSyscall", TestLevelProcessKillsEveryEscapeSyscall},
	{"TestLevelProcessHasNoPrivileges", TestLevelProcessHasNoPrivileges},
	{"TestLevelProcessDescriptorsAndIDs", TestLevelProcessDescriptorsAndIDs},
	{"TestLevelProcessCannotTraceOrReadOtherProcesses", TestLevelProcessCannotTraceOrReadOtherProcesses},
	{"TestBridgeHoldsAgainstRawFrames", TestBridgeHoldsAgainstRawFrames},
}

// notPython are the suite's tests that TestEveryRuntime does not repeat:
// JavaScript runs under Deno, whatever the runtime; and the tests of this
// file.
var notPython = []string{"TestEveryRuntime", "TestTheSuiteRunsOnEveryRuntime", "TestJavaScriptTimeoutMemoryAndOutput", "TestJavaScriptFilesystemEnvironmentAndNetworkAreDenied",
	"TestJavaScriptNetworkProxyIsTheOnlyWayOut", "TestJavaScriptPackagesRunNoScriptsAndOpenNothing"}

// TestEveryRuntime runs the Python suite on every runtime of the lock but
// the default (which the top-level tests run on), at both levels.
func TestEveryRuntime(t *testing.T) {
	for _, rt := range rootfs.DefaultLock().Names() {
		if rt == limits.DefaultRuntime {
			continue
		}
		t.Run(rt, func(t *testing.T) {
			testenv.Runtime(t, rt) // built once, before the parallel tests need it
			for _, tc := range pythonSuite {
				t.Run(tc.name, tc.fn)
			}
		})
	}
}

// TestTheSuiteRunsOnEveryRuntime: a test added to the suite is in
// pythonSuite (or, running no Python, in notPython).
func TestTheSuiteRunsOnEveryRuntime(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, tc := range pythonSuite {
		listed[tc.name] = true
	}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			if !listed[fn.Name.Name] && !slices.Contains(notPython, fn.Name.Name) {
				t.Errorf("%s (%s) runs on the default runtime only: add it to pythonSuite (or, if it runs no Python, to notPython)", fn.Name.Name, f)
			}
		}
	}
}
