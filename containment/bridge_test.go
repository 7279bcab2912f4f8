package containment

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// 29. Bridge: only tools the policy granted for this tenant and run can be
// called; arguments are size-limited; each call is audited (recorded) —
// also when the tool speaks the protocol by hand, floods it, or breaks it.
func TestBridgeHoldsAgainstRawFrames(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "bridge")
	srv := toolbridgetest.Start(t, "")
	eng, err := policy.New(context.Background(), policy.Options{Defaults: policies.FS, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"containment": {
		Servers: []toolconfig.Server{{Name: "math", URL: srv.URL}, {Name: "shell", URL: srv.URL}},
		Limits:  toolconfig.Limits{MaxCalls: 20},
	}}, toolbridge.Options{Policy: eng})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	run := hub.NewRun(toolbridge.RunInfo{TenantID: "containment", Roles: []string{"executor"}, DecisionID: "d", Granted: []string{"math.*"}})
	args, _ := json.Marshal(map[string]int{"flood": 2000})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.Run(ctx, sandbox.Spec{Source: source(t, "bridge_raw"), Args: args, Bridge: run,
		Limits: sandbox.Limits{TimeoutMS: 60000, CPUMS: 60000}.Or(limits.Default)})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	var out struct {
		Ungranted     string         `json:"ungranted"`
		OversizedArgs string         `json:"oversized_args"`
		Flood         map[string]int `json:"flood"`
		FloodIDs      int            `json:"flood_ids"`
		OtherVersion  string         `json:"other_version"`
		After         string         `json:"after"`
	}
	decode(t, res, &out)
	if out.Ungranted != sandbox.ErrToolDenied || out.OversizedArgs != sandbox.ErrToolDenied {
		t.Errorf("ungranted %s, oversized args %s; want ToolDenied for both", out.Ungranted, out.OversizedArgs)
	}
	// Two calls were spent before the flood: 18 of it go through.
	if out.Flood["ok"] != 18 || out.Flood[sandbox.ErrToolDenied] != 1982 || out.FloodIDs != 2000 {
		t.Errorf("flood outcomes %v over %d ids; want 18 ok, 1982 ToolDenied, every request answered once", out.Flood, out.FloodIDs)
	}
	if out.OtherVersion != sandbox.ErrToolUnavailable || out.After != "closed" {
		t.Errorf("a version 2 frame: %s, channel %s; want ToolUnavailable and closed", out.OtherVersion, out.After)
	}
	if n := srv.Calls("exec"); n != 0 {
		t.Errorf("the ungranted tool reached the server %d times", n)
	}
	if n := srv.Calls("add"); n != 18 {
		t.Errorf("the server answered %d adds, want 18", n)
	}
	if got := len(res.ToolCalls) + run.Dropped(); got != 2002 {
		t.Errorf("%d calls recorded or counted, want 2002", got)
	}
	if len(res.ToolCalls) > 20+16 {
		t.Errorf("%d calls kept one by one: the record must stay bounded", len(res.ToolCalls))
	}
}
