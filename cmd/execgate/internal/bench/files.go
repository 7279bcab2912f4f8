package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/execgate/execgate/internal/stats"
	"github.com/execgate/execgate/sandbox"
)

// The files section (issue #24): what one input file and one small
// artifact add to a trivial run through the gateway, at level jail (warm
// pool) and level process. The plain probe and the probe with a file are
// sent alternately, one at a time, so both see the same host (the load of
// whatever else runs on it).

// filesProbeSource reads its input file and saves it back as an artifact.
const filesProbeSource = "def run(args, context):\n    context.artifacts.save(\"copy.txt\", open(\"in.txt\").read())\n    return {\"ok\": True}\n"

// FilesRow compares the probe with and without one input file and one
// small artifact at one isolation level.
type FilesRow struct {
	Isolation          string
	Requests           int // of each variant
	Errors             int
	PlainP50, PlainP95 time.Duration
	FilesP50, FilesP95 time.Duration
	AddedP50           time.Duration // FilesP50 - PlainP50
}

func (r *Report) filesCost(ctx context.Context) error {
	tg, err := r.sandboxTarget(ctx, r.Options.WarmPool)
	if err != nil {
		return err
	}
	defer func() { _ = tg.stop(ctx) }()
	client := &http.Client{Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	send := func(body string) (time.Duration, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.url, strings.NewReader(body))
		if err != nil {
			return 0, false
		}
		req.Header.Set("Authorization", "Bearer "+tg.token)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		return d, resp.StatusCode == http.StatusOK && resp.Header.Get("X-Execution-Status") == "ok" &&
			(!strings.Contains(body, "in.txt") || strings.Contains(string(b), `"name":"copy.txt"`))
	}
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		plain, _ := json.Marshal(map[string]any{"source": ProbeSource, "isolation": level})
		withFiles, _ := json.Marshal(map[string]any{"source": filesProbeSource, "isolation": level,
			"files": []map[string]any{{"path": "in.txt", "content": "one small input file\n"}}})
		n := r.Options.Requests
		r.progress("files: %d plain and %d with a file and an artifact at level %s, alternately", n, n, level)
		row := FilesRow{Isolation: level, Requests: n}
		var a, b []time.Duration
		for i := -10; i < n; i++ { // 10 of each to warm up
			first, second := string(plain), string(withFiles)
			if i%2 != 0 {
				first, second = second, first
			}
			d1, ok1 := send(first)
			d2, ok2 := send(second)
			if i < 0 {
				continue
			}
			if !ok1 || !ok2 {
				row.Errors++
			}
			if i%2 != 0 {
				d1, d2 = d2, d1
			}
			a, b = append(a, d1), append(b, d2)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		slices.Sort(a)
		slices.Sort(b)
		row.PlainP50, row.PlainP95 = stats.Percentile(a, 0.5), stats.Percentile(a, 0.95)
		row.FilesP50, row.FilesP95 = stats.Percentile(b, 0.5), stats.Percentile(b, 0.95)
		row.AddedP50 = row.FilesP50 - row.PlainP50
		r.Files = append(r.Files, row)
	}
	return nil
}
