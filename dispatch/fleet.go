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
)

// Announcement is what an executor says about itself in its heartbeat.
type Announcement struct {
	ID string `json:"id"`
	// Slots is how many runs it runs at once; Busy how many it runs now.
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Languages it can run (python always; javascript/typescript with
	// Deno in its rootfs).
	Languages []string `json:"languages"`
	// Profiles are the isolation levels it serves ("jail").
	Profiles []string `json:"profiles"`
	// HarnessProtocol is the gateway↔harness protocol version of its
	// sandbox (jaillayout.ProtocolVersion); Wire the dispatch WireVersion.
	// Python and Platform are its rootfs's Python version ("3.11.2") and
	// uv's platform for its jails ("x86_64-manylinux_2_28"): gateways
	// resolve a run's requirements for them (envs.go). Empty: it cannot
	// install packages.
	Python          string `json:"python,omitempty"`
	Platform        string `json:"platform,omitempty"`
	HarnessProtocol int    `json:"harness_protocol"`
	Wire            int    `json:"wire"`
	Version         string `json:"version,omitempty"`
	StartedMS       int64  `json:"started_ms"`
	BeatMS          int64  `json:"beat_ms"`
}

// maxFleet bounds how many executors a gateway reads per look.
const maxFleet = 1000

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
		if json.Unmarshal([]byte(s), &a) == nil {
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
		parts = append(parts, fmt.Sprintf("%s (%d/%d busy, %s, harness v%d)", a.ID, a.Busy, a.Slots, strings.Join(a.Languages, "+"), a.HarnessProtocol))
	}
	return strings.Join(parts, "; ")
}
