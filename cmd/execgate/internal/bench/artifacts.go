package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"

	"github.com/execgate/execgate/limits"
)

// ArtifactFloodBytes is what each artifact-flood run leaves in
// /workspace/out and asks to be collected (its artifacts_bytes): the
// platform's largest (policies/platform.rego).
var ArtifactFloodBytes = limits.Max.ArtifactsBytes

// artifactFloodSource fills /workspace/out with args["files"] files of
// 1 MiB, then with as many empty files as its tmpfs takes, and saves a
// file named to escape: the gateway collects the largest set the platform
// grants and drops the rest.
const artifactFloodSource = `import os
def run(args, context):
    block = os.urandom(1 << 20)
    for i in range(args["files"]):
        with open("/workspace/out/big-%03d.bin" % i, "wb") as f:
            f.write(block)
    made = 0
    try:
        for i in range(100000):
            open("/workspace/out/z-%06d" % i, "w").close()
            made += 1
    except OSError:
        pass
    try:
        context.artifacts.save("../../x", "escape")
    except ValueError:
        pass
    return made
`

// ArtifactFloodReport is the gateway's resident memory around concurrent
// runs that each leave the platform's largest artifact set, and thousands
// of files more, in /workspace/out (issue #24). RSS in KiB.
type ArtifactFloodReport struct {
	FloodStats          // OK: 200 with the artifacts collected and the rest dropped
	ArtifactBytes int64 // each run's artifacts_bytes
	StoreMB       int64 // server.async_tenant_artifact_bytes (the memory store keeps them)
}

// artifactFlood measures ArtifactFloodReport against an in-process
// gateway (this process's RSS is the gateway's).
func (r *Report) artifactFlood(ctx context.Context) error {
	tg, err := r.sandboxTarget(ctx, 0)
	if err != nil {
		return err
	}
	defer func() { _ = tg.stop(ctx) }()
	conc := 2 * runtime.NumCPU()
	srv := r.Options.Config.Server.WithDefaults()
	rep := &ArtifactFloodReport{FloodStats: FloodStats{Concurrency: conc, Requests: 2 * conc, BudgetMB: srv.MaxOutputMemoryMB},
		ArtifactBytes: ArtifactFloodBytes, StoreMB: srv.AsyncTenantArtifactBytes >> 20}
	files := ArtifactFloodBytes >> 20
	body, _ := json.Marshal(map[string]any{
		"source": artifactFloodSource,
		"args":   map[string]any{"files": files},
		// /workspace/out holds the set (tmp_mb), its pages are the run's
		// memory (memory_mb).
		"limits": map[string]any{"artifacts_bytes": ArtifactFloodBytes, "artifacts": limits.Max.Artifacts,
			"tmp_mb": 2 * files, "memory_mb": 512, "timeout_ms": 30000, "cpu_ms": 30000},
	})
	if a := postFlood(ctx, tg, []byte(probeBody(r.Options.Runtimes[0], ""))); a.status != http.StatusOK {
		return fmt.Errorf("bench: artifacts: the probe answered %d", a.status)
	}
	runtime.GC()
	debug.FreeOSMemory()
	rep.IdleKB = selfRSSKB()

	r.progress("output: %d artifact-flood runs (%d MiB of artifacts and ~4000 files more each) at concurrency %d", rep.Requests, files, conc)
	f := runFlood(rep.Requests, conc, func() floodAnswer { return postArtifactFlood(ctx, tg, body) })
	rep.OK, rep.Overloaded, rep.Errors, rep.MaxBodyBytes, rep.Wall, rep.PeakKB = f.ok, f.overloaded, f.errors, f.maxBody, f.wall, f.peakKB
	rep.AfterKB = f.afterKB
	r.ArtifactFlood = rep
	return nil
}

// postArtifactFlood sends one flood request and checks that the answer
// lists the collected set and says what was dropped.
func postArtifactFlood(ctx context.Context, tg *target, body []byte) floodAnswer {
	resp, err := tg.post(ctx, body)
	if err != nil {
		return floodAnswer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return floodAnswer{}
	}
	var env struct {
		Artifacts []struct {
			Bytes int64 `json:"bytes"`
		} `json:"artifacts"`
		Truncated struct {
			ArtifactsDropped int `json:"artifacts_dropped"`
		} `json:"truncated"`
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	var total int64
	for _, a := range env.Artifacts {
		total += a.Bytes
	}
	return floodAnswer{
		status:     resp.StatusCode,
		bytes:      int64(len(b)),
		ok:         resp.StatusCode == http.StatusOK && total > 0 && total <= ArtifactFloodBytes && env.Truncated.ArtifactsDropped > 0,
		overloaded: env.Error != nil && env.Error.Type == "Overloaded",
	}
}
