package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/execgate/execgate/jaillayout"
)

// fakeJail answers probes with fixed results, so the judging of what a jail
// reports is tested without a jail.
type fakeJail struct {
	facts  JailFacts
	err    error
	probed []string
	closed bool
}

func (f *fakeJail) Probe(_ context.Context, p Probe) (*ProbeResult, error) {
	f.probed = append(f.probed, p.ID+"/"+p.Language)
	if f.err != nil {
		return nil, f.err
	}
	data, _ := json.Marshal(f.facts)
	return &ProbeResult{OK: true, Result: data, WallMS: 1, CPUMS: 1}, nil
}

func (f *fakeJail) Close() error { f.closed = true; return nil }

func TestVerifyJailJudgesWhatTheJailReports(t *testing.T) {
	m := &Manifest{PythonVersion: "3.11.2"}
	good := JailFacts{PythonVersion: "3.11.2", Executable: jaillayout.PythonPath, UID: jaillayout.ToolUID, GID: jaillayout.ToolGID, CACerts: 3, Modules: 9}
	tests := []struct {
		name   string
		facts  func(f *JailFacts)
		failed string // "" for none
	}{
		{name: "a jail that reports the layout passes", facts: func(*JailFacts) {}},
		{name: "a tool that runs as another uid fails identity", facts: func(f *JailFacts) { f.UID = 0 }, failed: "identity in jail"},
		{name: "an interpreter at another path fails", facts: func(f *JailFacts) { f.Executable = "/usr/local/bin/python3" }, failed: "interpreter in jail"},
		{name: "an empty trust store fails", facts: func(f *JailFacts) { f.CACerts = 0 }, failed: "CA certificates in jail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &fakeJail{facts: good}
			tt.facts(&j.facts)
			r := &Report{Dir: "/r"}
			if err := verifyJail(context.Background(), r, m, func(dir string) (Jail, error) {
				if dir != "/r" {
					t.Errorf("opened %s, want /r", dir)
				}
				return j, nil
			}); err != nil {
				t.Fatal(err)
			}
			if !j.closed || len(j.probed) != 1 || j.probed[0] != "rootfs-verify/python" {
				t.Errorf("probes %v, closed %v", j.probed, j.closed)
			}
			var failed []string
			for _, c := range r.Failed() {
				failed = append(failed, c.Name)
			}
			if got := strings.Join(failed, ","); got != tt.failed {
				t.Errorf("failed checks %q, want %q", got, tt.failed)
			}
		})
	}
}

func TestVerifyJailCarriesTheJailsHint(t *testing.T) {
	cause := errors.New("nsjail not found")
	r := &Report{Dir: "/r"}
	err := verifyJail(context.Background(), r, &Manifest{}, func(string) (Jail, error) {
		return nil, &JailError{Err: cause, Hint: "run scripts/setup.sh"}
	})
	if !errors.Is(err, cause) {
		t.Fatalf("error %v, want the jail's", err)
	}
	c, failed := failedCheck(r, "jailed run")
	if !failed || c.Hint != "run scripts/setup.sh" {
		t.Errorf("jailed run check = %+v", c)
	}
}
