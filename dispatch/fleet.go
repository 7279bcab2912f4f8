package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
)

// Announcement is what an executor says about itself in its heartbeat.
type Announcement struct {
	ID string `json:"id"`
	// Slots is how many runs it runs at once; Busy how many it runs now.
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Languages it can run (python always; javascript/typescript with
	// Deno in a runtime's rootfs).
	Languages []string `json:"languages"`
	// Profiles are the isolation levels it serves ("jail").
	Profiles []string `json:"profiles"`
	// Runtimes are the Python runtimes it serves: their Python version and
	// uv platform (gateways resolve a run's requirements for them,
	// envs.go; an empty platform: it cannot install packages), what they
	// are built from. It reads the run streams of the available ones
	// (and of Deno, with a runtime carrying it).
	Runtimes []runtimes.Info `json:"runtimes"`
	// HarnessProtocol is the gateway↔harness protocol version of its
	// sandbox (jaillayout.ProtocolVersion); Wire the dispatch WireVersion.
	HarnessProtocol int    `json:"harness_protocol"`
	Wire            int    `json:"wire"`
	Version         string `json:"version,omitempty"`
	StartedMS       int64  `json:"started_ms"`
	BeatMS          int64  `json:"beat_ms"`
}

// maxFleet bounds how many executors a gateway reads per look.
const maxFleet = 1000

// Bounds of one announcement a gateway reads: its JSON, and the runtimes
// it keeps of it.
const (
	maxAnnouncementBytes = 64 << 10
	maxAnnouncedRuntimes = 8
)

// serves reports whether a serves target: an available runtime of that
// name, or Deno ("deno") in one.
func (a Announcement) serves(target string) bool {
	for _, rt := range a.Runtimes {
		if rt.Available && (rt.Name == target || (target == denoTarget && rt.Deno != "")) {
			return true
		}
	}
	return false
}

// targets are the run streams a serves (targetsOf).
func (a Announcement) targets() []string { return targetsOf(a.Runtimes) }

// targetsOf are the targets of rts: every available runtime, and Deno
// when one of them carries it.
func targetsOf(rts []runtimes.Info) []string {
	var out []string
	deno := false
	for _, rt := range rts {
		if !rt.Available {
			continue
		}
		out = append(out, rt.Name)
		deno = deno || rt.Deno != ""
	}
	if deno {
		out = append(out, denoTarget)
	}
	return out
}

// denoTarget is the target of JavaScript and TypeScript runs.
const denoTarget = runtimes.DenoRuntime

// target is the run stream spec goes to: its Python runtime (the default
// one when it names none), or Deno for the other languages.
func target(spec sandbox.Spec) string {
	if spec.Language != "" && spec.Language != sandbox.LanguagePython {
		return denoTarget
	}
	if spec.Runtime == "" {
		return limits.DefaultRuntime
	}
	return spec.Runtime
}

// live returns the executors whose heartbeat has not expired, by id.
func live(ctx context.Context, rdb redis.UniversalClient, k keys, now time.Time) ([]Announcement, error) {
	ids, err := rdb.ZRangeByScore(ctx, k.executors(), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf", Count: maxFleet,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("listing executors: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	ks := make([]string, len(ids))
	for i, id := range ids {
		ks[i] = k.executor(id)
	}
	vals, err := rdb.MGet(ctx, ks...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading executors: %w", err)
	}
	out := make([]Announcement, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired between the two reads
		}
		var a Announcement
		if len(s) <= maxAnnouncementBytes && json.Unmarshal([]byte(s), &a) == nil {
			if len(a.Runtimes) > maxAnnouncedRuntimes {
				a.Runtimes = a.Runtimes[:maxAnnouncedRuntimes]
			}
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// usable are the executors a gateway of this build can dispatch to.
func usable(fleet []Announcement) []Announcement {
	var out []Announcement
	for _, a := range fleet {
		if a.Wire == WireVersion && a.Slots > 0 {
			out = append(out, a)
		}
	}
	return out
}

// describe renders the fleet for /readyz.
func describe(fleet []Announcement) string {
	parts := make([]string, 0, len(fleet))
	for _, a := range fleet {
		parts = append(parts, fmt.Sprintf("%s (%d/%d busy, %s, harness v%d)", a.ID, a.Busy, a.Slots, strings.Join(a.targets(), "+"), a.HarnessProtocol))
	}
	return strings.Join(parts, "; ")
}
