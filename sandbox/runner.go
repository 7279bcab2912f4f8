package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/secrets"
)

// Errors carried by an *UnavailableError from NewRunner (errors.Is).
var (
	// ErrRootfsMissing: there is no rootfs (or no manifest) at RootfsDir.
	ErrRootfsMissing = errors.New("rootfs missing")
	// ErrRootfsStale: the rootfs was built by another execgate (protocol or
	// harness differ).
	ErrRootfsStale = errors.New("rootfs built by a different execgate")
	// ErrNotRoot: the runner is not running as root.
	ErrNotRoot = errors.New("not running as root")
)

// Info describes the runner for `execgate diagnose` and /readyz.
type Info struct {
	NsjailPath    string `json:"nsjail_path"`
	NsjailVersion string `json:"nsjail_version"`
	CgroupVersion int    `json:"cgroup_version"`
	CgroupRoot    string `json:"cgroup_root"`
	RootfsDir     string `json:"rootfs_dir"`
	// ViewDir is where the runner mounted the jail's view of its host
	// directories (the rootfs, deps and jails dirs, read-only), which is
	// where nsjail finds them (package view).
	ViewDir string `json:"view_dir"`
	// UIDRange is sandbox.uid_range: each live jail runs as a host uid of
	// its own from it.
	UIDRange        string `json:"uid_range"`
	PythonVersion   string `json:"python_version"`
	HarnessSHA256   string `json:"harness_sha256"`
	ProtocolVersion int    `json:"protocol_version"`
	// WarmPool is the configured number of warm jails per profile; WarmIdle
	// how many are waiting right now (all profiles).
	WarmPool int `json:"warm_pool"`
	WarmIdle int `json:"warm_idle"`
	// CPUAccounting says how the jail's CPU time is measured (and the CPU
	// limit enforced for all its processes together); "none" where the
	// host offers no cgroup for it.
	CPUAccounting string `json:"cpu_accounting"`
}

// CheckRootfs validates the rootfs at dir against this binary: its manifest
// (for the Python version a package environment resolves for), protocol
// and harness. A failure is an *UnavailableError saying how to rebuild it.
func CheckRootfs(dir string) (*jaillayout.Manifest, error) {
	// A runtime's tree is <runtimes_dir>/<name>; the host runtime's is
	// named by sandbox.rootfs_dir.
	runtime := filepath.Base(dir)
	if !limits.KnownRuntime(runtime) {
		runtime = limits.HostRuntime
	}
	build := fmt.Sprintf("`execgate rootfs build --runtime %s --out %s`", runtime, dir)
	rebuild := "rebuild with " + build
	m, err := jaillayout.ReadManifest(dir)
	if errors.Is(err, jaillayout.ErrNoManifest) {
		return nil, &UnavailableError{
			Reason: fmt.Sprintf("no rootfs at %s (%v)", dir, err),
			Hint:   "build it with " + build + " (execgate run and serve build it on first use)",
			Err:    ErrRootfsMissing,
		}
	}
	if err != nil {
		return nil, &UnavailableError{Reason: fmt.Sprintf("rootfs at %s has an unreadable manifest: %v", dir, err), Hint: rebuild, Err: ErrRootfsStale}
	}
	if m.ProtocolVersion != jaillayout.ProtocolVersion || m.HarnessSHA256 != harness.Hash() {
		return nil, &UnavailableError{
			Reason: fmt.Sprintf("rootfs at %s was built by a different execgate (protocol %d, harness %.12s; this binary: protocol %d, harness %.12s); %s",
				dir, m.ProtocolVersion, m.HarnessSHA256, jaillayout.ProtocolVersion, harness.Hash(), rebuild),
			Hint: rebuild,
			Err:  ErrRootfsStale,
		}
	}
	for _, p := range []string{jaillayout.PythonPath, harness.Dir + "/" + harness.Entry, jaillayout.EgressDir} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return nil, &UnavailableError{Reason: fmt.Sprintf("rootfs at %s lacks %s", dir, p), Hint: rebuild, Err: ErrRootfsStale}
		}
	}
	return m, nil
}

var entrypointRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// normalize applies defaults to spec and checks it; limits are checked,
// never defaulted (limits.Validate). A bad spec is the caller's mistake and
// is reported as an InvalidInput result (nothing runs).
// An empty language, entrypoint, mode or network is read as the request
// default of package limits, for the runner's direct callers (diagnose,
// bench, tests); a request reaches the runner with those defaults already
// applied by the policy (policy.Request.WithDefaults).
// Test mode is not given a network here: a test-mode spec asking for one is
// refused.
func normalize(spec Spec) (Spec, profile, error) {
	if spec.Entrypoint == "" {
		spec.Entrypoint = limits.DefaultEntrypoint
	}
	if spec.Mode == "" {
		spec.Mode = limits.DefaultMode
	}
	if spec.Network == "" {
		spec.Network = Network(limits.DefaultNetworkAccess)
	}
	if spec.Language == "" {
		spec.Language = limits.DefaultLanguage
	}
	var errs []error
	switch spec.Language {
	case LanguagePython, LanguageJavaScript, LanguageTypeScript:
	default:
		errs = append(errs, fmt.Errorf("language: %q is not python, javascript or typescript", spec.Language))
	}
	rt := runtimeOf(spec.Language, spec.Mode)
	if rt.deno() {
		errs = append(errs, checkDenoSpec(spec)...)
	}
	if !entrypointRE.MatchString(spec.Entrypoint) {
		errs = append(errs, fmt.Errorf("entrypoint: %q is not an identifier", spec.Entrypoint))
	}
	switch spec.Mode {
	case "run":
	case ModeValidate:
		if !rt.deno() {
			errs = append(errs, errors.New("mode: validate is for javascript and typescript only"))
		}
		spec.Network = NetworkNone
	case "test":
		// Capability testing never touches the network (DESIGN §12.6): the
		// policy decides none for it and the gateway holds the decision to
		// that; a spec asking otherwise is a caller's mistake.
		if spec.Network != NetworkNone {
			errs = append(errs, fmt.Errorf("network: test mode runs with network none, not %q", spec.Network))
		}
	default:
		errs = append(errs, fmt.Errorf("mode: %q is not run or test", spec.Mode))
	}
	switch spec.Network {
	case NetworkNone, NetworkHost, NetworkProxy:
	default:
		errs = append(errs, fmt.Errorf("network: %q is not none, proxy or host", spec.Network))
	}
	for name, raw := range map[string]json.RawMessage{"args": spec.Args, "variables": spec.Variables, "tools": spec.ToolFixtures} {
		if len(raw) > 0 && !json.Valid(raw) {
			errs = append(errs, fmt.Errorf("%s: not valid JSON", name))
		}
	}
	if len(spec.Variables) > 0 && !isJSONObject(spec.Variables) {
		errs = append(errs, errors.New("variables: must be a JSON object"))
	}
	if len(spec.ToolFixtures) > 0 && !isJSONObject(spec.ToolFixtures) {
		errs = append(errs, errors.New("tools: must be a JSON object"))
	}
	errs = append(errs, checkSecrets(spec.Secrets)...)
	if err := checkFiles(spec.Files, spec.Limits); err != nil {
		errs = append(errs, err)
	}
	if len(spec.Stdin) > maxStdinBytes {
		errs = append(errs, fmt.Errorf("stdin: %d bytes; at most %d", len(spec.Stdin), maxStdinBytes))
	}
	if spec.Lock != "" && spec.Deps == "" {
		errs = append(errs, errors.New("lock: the runner installs nothing; prepare the environment (package environments) and pass its directory as deps"))
	}
	l := spec.Limits
	if err := l.Validate(); err != nil {
		errs = append(errs, err)
	}
	if l.MemoryMB > 0 && l.MemoryMB < minMemoryMB {
		errs = append(errs, fmt.Errorf("limits.memory_mb: %d is below the minimum of %d", l.MemoryMB, minMemoryMB))
	}
	if l.Pids > 0 && l.Pids < minPids {
		errs = append(errs, fmt.Errorf("limits.pids: %d is below the minimum of %d", l.Pids, minPids))
	}
	return spec, profile{Runtime: rt, Network: spec.Network, Limits: l}, errors.Join(errs...)
}

// checkSecrets refuses secrets the harness could not write as files or
// that are over their bounds (the flow checked them already; the runner
// does not trust its caller).
func checkSecrets(vals []secrets.Value) []error {
	var errs []error
	if len(vals) > secrets.MaxPerRun {
		errs = append(errs, fmt.Errorf("secrets: %d secrets; at most %d", len(vals), secrets.MaxPerRun))
	}
	seen := map[string]bool{}
	for _, v := range vals {
		switch {
		case !secrets.ValidName(v.Name()):
			errs = append(errs, fmt.Errorf("secrets: %q is not a secret name", v.Name()))
		case seen[v.Name()]:
			errs = append(errs, fmt.Errorf("secrets: %q is given twice", v.Name()))
		case len(v.Reveal()) == 0 || len(v.Reveal()) > secrets.MaxValueBytes:
			errs = append(errs, fmt.Errorf("secrets: %s: the value is empty or over %d bytes", v.Name(), secrets.MaxValueBytes))
		default:
			if err := secrets.CheckText(v.Reveal()); err != nil {
				errs = append(errs, fmt.Errorf("secrets: %s: %w", v.Name(), err))
			}
		}
		seen[v.Name()] = true
	}
	return errs
}

// maxStdinBytes bounds Spec.Stdin (the gateway bounds it like args).
const maxStdinBytes = 16 << 20

// checkFiles refuses input files beyond l (limits.files, files_bytes) or
// that break workspace.CheckFiles.
func checkFiles(files []File, l Limits) error {
	if len(files) == 0 {
		return nil
	}
	if int64(len(files)) > l.Files {
		return fmt.Errorf("files: %d files; limits.files is %d", len(files), l.Files)
	}
	var total int64
	for _, f := range files {
		total += int64(len(f.Content))
	}
	if total > l.FilesBytes {
		return fmt.Errorf("files: %d bytes; limits.files_bytes is %d", total, l.FilesBytes)
	}
	if i, err := workspace.CheckFiles(files); err != nil {
		return fmt.Errorf("files[%d] %q: %w", i, files[i].Path, err)
	}
	return nil
}

// Minimum limits under which the interpreter cannot start.
const (
	minMemoryMB = 16
	minPids     = 2
)

func isJSONObject(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return strings.HasPrefix(s, "{") || s == "null"
}

// request is what the harness reads on stdin (protocol jaillayout.ProtocolVersion).
type request struct {
	ProtocolVersion int             `json:"protocol_version"`
	Language        string          `json:"language"`
	ExecutionID     string          `json:"execution_id"`
	TenantID        string          `json:"tenant_id"`
	Source          string          `json:"source"`
	Entrypoint      string          `json:"entrypoint"`
	Args            json.RawMessage `json:"args"`
	Mode            string          `json:"mode"`
	Variables       json.RawMessage `json:"variables"`
	Tools           json.RawMessage `json:"tools"`
	DeadlineUnixMS  int64           `json:"deadline_unix_ms"`
	OutputBytes     int64           `json:"output_bytes"`
	CPUMS           int64           `json:"cpu_ms"`
	MaxLogLines     int             `json:"max_log_lines"`
	Deps            bool            `json:"deps"`
	// EgressSocket is the egress proxy's socket inside the jail (network
	// mode proxy): the harness relays 127.0.0.1:3128 to it.
	EgressSocket string `json:"egress_socket,omitempty"`
	// Secrets are the run's brokered secrets, name → value: the one place
	// their values leave the host's memory (over the request pipe).
	Secrets map[string]string `json:"secrets,omitempty"`
	// Bridge describes the tool bridge socket (bridge.go).
	Bridge bridgeInfo `json:"bridge"`
	// Stdin is what the harness gives the tool as its standard input.
	Stdin string `json:"stdin,omitempty"`
}

// bridgeInfo tells the harness where the tool bridge is and how large a
// request may be.
type bridgeInfo struct {
	// FD is the bridge socket (Python); a Deno harness uses stdout frames
	// of kind 3 and stdin instead (demux.go).
	FD              int `json:"fd"`
	Version         int `json:"version"`
	MaxRequestBytes int `json:"max_request_bytes"`
	// MaxInflight is how many requests the harness may leave unanswered
	// (the Deno harness queues the others; see stdioChannel).
	MaxInflight int `json:"max_inflight"`
}

func rawOr(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	return raw
}

// encodeRequest renders the harness request for a run handed off at
// startUnixMS. Fixture tools are passed in test mode only.
func encodeRequest(spec Spec, startUnixMS int64) ([]byte, error) {
	req := request{
		ProtocolVersion: jaillayout.ProtocolVersion,
		Language:        spec.Language,
		ExecutionID:     spec.ExecutionID,
		TenantID:        spec.TenantID,
		Source:          spec.Source,
		Entrypoint:      spec.Entrypoint,
		Args:            rawOr(spec.Args, "null"),
		Mode:            spec.Mode,
		Variables:       rawOr(spec.Variables, "{}"),
		Tools:           json.RawMessage("{}"),
		DeadlineUnixMS:  startUnixMS + spec.Limits.TimeoutMS,
		OutputBytes:     spec.Limits.OutputBytes,
		CPUMS:           spec.Limits.CPUMS,
		MaxLogLines:     maxEnvelopeLogs,
		Deps:            spec.Deps != "",
		Bridge:          bridgeInfo{FD: bridgeFD, Version: BridgeProtocolVersion, MaxRequestBytes: maxBridgeRequest, MaxInflight: maxBridgeInflight},
		Stdin:           spec.Stdin,
	}
	if spec.Network == NetworkProxy {
		req.EgressSocket = jaillayout.EgressSocket
	}
	if spec.Mode == "test" {
		req.Tools = rawOr(spec.ToolFixtures, "{}")
	}
	if len(spec.Secrets) > 0 {
		req.Secrets = make(map[string]string, len(spec.Secrets))
		for _, v := range spec.Secrets {
			req.Secrets[v.Name()] = v.Reveal()
		}
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the harness request: %w", err)
	}
	return data, nil
}
