package bench

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
)

func TestSectionSnekboxRunsOnlyWhenNamedAndNeedsItsDriver(t *testing.T) {
	cfg := &config.Config{}
	o, err := Options{Config: cfg}.normalized()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(o.Sections, SectionSnekbox) {
		t.Fatalf("default sections %v include %s, which needs a driver", o.Sections, SectionSnekbox)
	}
	_, err = Options{Config: cfg, Sections: []string{SectionSnekbox}}.normalized()
	if err == nil || !strings.Contains(err.Error(), "--snekbox") {
		t.Fatalf("section snekbox without a driver: got %v, want an error naming --snekbox", err)
	}
	o, err = Options{Config: cfg, Sections: []string{SectionSnekbox}, Snekbox: []string{"python3", "driver.py"}}.normalized()
	if err != nil || !slices.Equal(o.Sections, []string{SectionSnekbox}) {
		t.Fatalf("section snekbox with a driver: got %v, %v", o.Sections, err)
	}
	if c := o.Command(); !strings.Contains(c, "--snekbox 'python3 driver.py'") {
		t.Fatalf("command %q does not name the driver", c)
	}
}

func TestPeerCommandReplacesTheLogAndHomePlaceholders(t *testing.T) {
	args := []string{"/nsjail", "--config", "/s.cfg", "--log", "LOG", "--bindmount", "HOME:home", "--", "/usr/bin/python3", "-c", "HOME"}
	got, err := peerCommand(args, "/dev/null", "/tmp/h")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/nsjail", "--config", "/s.cfg", "--log", "/dev/null", "--bindmount", "/tmp/h:home", "--", "/usr/bin/python3", "-c", "HOME"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := peerCommand(args[:5], "/dev/null", "/tmp/h"); err == nil {
		t.Fatal("a command without its home placeholder was accepted")
	}
}

// The driver protocol against a stand-in driver (a shell script speaking
// scripts/snekbox-driver.py's lines): ready first, then one line of runs per
// request; a short answer is an error.
func TestPeerDriverProtocol(t *testing.T) {
	script := `echo '{"ready": true, "commit": "abc", "config": "/s.cfg", "args": ["/nsjail", "--log", "LOG"]}'
read line; echo '{"runs": [{"wall_ns": 5000000, "cpu_ns": 3000000, "self_ns": 1000000}, {"wall_ns": 7000000, "cpu_ns": 4000000, "self_ns": 1000000}]}'
read line; echo '{"runs": []}'
`
	var stderr bytes.Buffer
	d, rep, err := startPeerDriver(context.Background(), []string{"sh", "-c", script}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if rep.Commit != "abc" || rep.Config != "/s.cfg" || !slices.Equal(rep.args, []string{"/nsjail", "--log", "LOG"}) {
		t.Fatalf("ready: %+v", rep)
	}
	runs, err := d.runs(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[1].WallNS != 7e6 || runs[0].CPUNS != 3e6 {
		t.Fatalf("runs: %+v", runs)
	}
	if _, err := d.runs(2); err == nil || !strings.Contains(err.Error(), "answered 0 runs of 2") {
		t.Fatalf("short answer: got %v", err)
	}
	if _, err := d.runs(1); err == nil {
		t.Fatal("a driver that exited answered")
	}
	if _, _, err := startPeerDriver(context.Background(), []string{"sh", "-c", "echo not-json"}, io.Discard); err == nil {
		t.Fatal("a driver that never got ready was accepted")
	}
}

func TestPeerMarkdownRatiosToSnekbox(t *testing.T) {
	st := func(d time.Duration) Stats { return Stats{Median: d, P95: d, Min: d} }
	p := &PeerReport{Commit: "abc", Config: "/s.cfg", Argv: "nsjail", Rows: []PeerRow{
		{Name: "snekbox", Runs: 5, Wall: st(40 * time.Millisecond), CPU: st(30 * time.Millisecond), Driver: 2 * time.Millisecond},
		{Name: "warm", Runs: 5, Wall: st(10 * time.Millisecond), CPU: st(21 * time.Millisecond), Driver: 5 * time.Millisecond},
		{Name: "phase", Runs: 5, Wall: st(20 * time.Millisecond), CPU: st(6 * time.Millisecond), Process: true},
	}}
	var b bytes.Buffer
	p.markdown(&b, 5)
	out := b.String()
	for _, want := range []string{"| warm | 10.0 ms | 10.0 ms | 21.0 ms | 21.0 ms | 5.0 ms | 0.25× | 0.70× |", "| phase | 20.0 ms | 20.0 ms | 6.0 ms | 6.0 ms | – | 0.50× | 0.20× |", "snekbox abc"} {
		if !strings.Contains(out, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, out)
		}
	}
}
