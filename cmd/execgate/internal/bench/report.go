package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// Markdown writes the report as the tables BENCHMARKS.md keeps.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "Measured %s on %s.\n\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Host)
	if len(r.Startup) > 0 {
		fmt.Fprintf(w, "### Start-up, whole process (%d runs each after one warm-up)\n\n", r.Options.Runs)
		fmt.Fprintln(w, "| variant | runtime | wall p50 | wall p95 | wall min | cpu p50 | vs raw nsjail (harness) |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
		raw := map[string]time.Duration{} // runtime → its raw nsjail harness row
		for _, s := range r.Startup {
			if s.Name == "raw nsjail: harness + probe" {
				raw[s.Runtime] = s.Wall.Median
			}
		}
		first := ""
		if len(r.Options.Runtimes) > 0 {
			first = r.Options.Runtimes[0]
		}
		for _, s := range r.Startup {
			base, rt := raw[s.Runtime], s.Runtime
			if rt == "" {
				base, rt = raw[first], "–"
			}
			ratio := "–"
			if base > 0 {
				ratio = fmt.Sprintf("%.2f×", float64(s.Wall.Median)/float64(base))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", s.Name, rt, ms(s.Wall.Median), ms(s.Wall.P95), ms(s.Wall.Min), ms(s.CPU.Median), ratio)
		}
		fmt.Fprintln(w, "\nCommands:")
		fmt.Fprintln(w)
		for _, s := range r.Startup {
			name := s.Name
			if s.Runtime != "" {
				name += " (" + s.Runtime + ")"
			}
			fmt.Fprintf(w, "- %s: `%s`\n", name, s.Command)
		}
		fmt.Fprintln(w)
	}
	if len(r.Gateway) > 0 {
		fmt.Fprintf(w, "### Gateway, HTTP end to end (probe tool, %d requests per row, closed loop)\n\n", r.Options.Requests)
		fmt.Fprintln(w, "| mode | language | runtime | isolation | concurrency | p50 | p95 | p99 | max | req/s | CPU/run | errors |")
		fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, g := range r.Gateway {
			rt := g.Runtime
			if rt == "" {
				rt = "–"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %.1f | %s | %d |\n", g.Mode, g.Language, rt, g.Isolation, g.Concurrency, ms(g.P50), ms(g.P95), ms(g.P99), ms(g.Max), g.RPS, ms(g.CPUPerRun), g.Errors)
		}
		fmt.Fprintf(w, "\ncold: no warm pool, every run starts nsjail; warm: sandbox.warm_pool=%d; process: isolation process (a fresh process forked from the tenant's zygote). CPU/run: the gateway process (load client included) and every jail and zygote, per request. At each mode and concurrency the runtimes (and JavaScript, on the default runtime's Deno) ran one after the other on the same gateway.\n\n", r.Options.WarmPool)
		r.ratios(w)
	}
	if len(r.Overhead) > 0 {
		fmt.Fprintln(w, "### Gateway overhead: auth + validation + policy + quota + audit, no-op executor")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| concurrency | requests | p50 | p95 | p99 | req/s | errors |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
		for _, o := range r.Overhead {
			fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %.0f | %d |\n", o.Concurrency, o.Requests, us(o.P50), us(o.P95), us(o.P99), o.RPS, o.Errors)
		}
		fmt.Fprintln(w)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintln(w, "### Memory (RSS)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| what | RSS |")
		fmt.Fprintln(w, "|---|---:|")
		fmt.Fprintf(w, "| gateway idle (after start-up) | %s |\n", mib(m.GatewayIdleKB))
		fmt.Fprintf(w, "| gateway peak under cold load | %s |\n", mib(m.GatewayPeakKB))
		fmt.Fprintf(w, "| one idle warm jail (nsjail + harness), mean of %d | %s |\n", m.WarmJails, mib(m.PerWarmJailKB))
		fmt.Fprintln(w)
	}
	if o := r.Output; o != nil {
		fmt.Fprintf(w, "### Output floods: gateway RSS (%d runs at concurrency %d, each writing %d MiB of 0x01 to stdout and to stderr, output_bytes %d MiB)\n\n",
			o.Requests, o.Concurrency, OutputFloodBytes>>20, OutputFloodBytes>>20)
		o.FloodStats.writeRows(w, "200 truncated")
		fmt.Fprintf(w, "\nserver.max_output_memory_mb = %d.\n\n", o.BudgetMB)
	}
	if o := r.ArtifactFlood; o != nil {
		fmt.Fprintf(w, "### Artifact floods: gateway RSS (%d runs at concurrency %d, each leaving %d MiB of artifacts, its artifacts_bytes, and ~4000 files more in /workspace/out)\n\n",
			o.Requests, o.Concurrency, o.ArtifactBytes>>20)
		o.FloodStats.writeRows(w, "200 collected and dropped")
		fmt.Fprintf(w, "\nserver.max_output_memory_mb = %d; the memory store keeps the tenant's artifacts up to server.async_tenant_artifact_bytes = %d MiB. Bound: idle + %d MiB + %d MiB.\n\n", o.BudgetMB, o.StoreMB, o.BudgetMB, o.StoreMB)
	}
	if o := r.Readers; o != nil {
		fmt.Fprintf(w, "### Stalled readers: RSS of a separate `execgate serve` process (readers over loopback that never read past the response head)\n\n")
		fmt.Fprintln(w, "| what | value |")
		fmt.Fprintln(w, "|---|---:|")
		fmt.Fprintf(w, "| stored result: %d stalled GET /v1/executions/{id} of one %.1f MiB result: RSS before / peak | %s / %s |\n",
			o.ResultReaders, float64(o.ResultBytes)/(1<<20), mib(o.ResultIdleKB), mib(o.ResultPeakKB))
		fmt.Fprintf(w, "| live output: %d stalled …/events streams of one run: admitted / 429 | %d / %d |\n", o.LiveReaders, o.LiveAdmitted, o.LiveRefused)
		fmt.Fprintf(w, "| live output: RSS before / peak | %s / %s |\n", mib(o.LiveIdleKB), mib(o.LivePeakKB))
		fmt.Fprintf(w, "| another tenant's probe run: before / during the live readers | %s / %s |\n", ms(o.ProbeIdle), ms(o.ProbeDuring))
		fmt.Fprintf(w, "| bound: server.max_output_memory_mb + %d MiB | %d MiB |\n", ReadersConstantMB, o.BudgetMB+ReadersConstantMB)
		fmt.Fprintf(w, "\nserver.tenant_max_result_readers = %d for the stored-result row (every reader held); server.tenant_max_live_readers at its default.\n\n", o.ResultReaders)
	}
	if b := r.Bridge; b != nil {
		fmt.Fprintf(w, "### Tool bridge call round trip (code mode, %d calls per row after one warm-up, MCP server on loopback in-process)\n\n", r.Options.BridgeCalls)
		b.Markdown(w)
		fmt.Fprintln(w)
	}
	if len(r.Files) > 0 {
		fmt.Fprintf(w, "### One input file and one small artifact (probe vs the probe reading a file and saving it as an artifact, %d of each, sent alternately at concurrency 1)\n\n", r.Files[0].Requests)
		fmt.Fprintln(w, "| level | plain p50 / p95 | with a file and an artifact p50 / p95 | added p50 | errors |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
		for _, f := range r.Files {
			fmt.Fprintf(w, "| %s | %s / %s | %s / %s | %s | %d |\n", f.Isolation, ms(f.PlainP50), ms(f.PlainP95), ms(f.FilesP50), ms(f.FilesP95), ms(f.AddedP50), f.Errors)
		}
		fmt.Fprintln(w)
	}
	if r.Peer != nil {
		r.Peer.markdown(w, r.Options.Runs)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

// ratios writes, for every runtime after the first, its gateway rows
// divided by the first runtime's at the same mode and concurrency
// (measured back to back: a busy host moves both).
func (r *Report) ratios(w io.Writer) {
	if len(r.Options.Runtimes) < 2 {
		return
	}
	base := r.Options.Runtimes[0]
	type key struct {
		mode string
		c    int
	}
	first := map[key]GatewayRow{}
	for _, g := range r.Gateway {
		if g.Runtime == base && g.Language == sandbox.LanguagePython {
			first[key{g.Mode, g.Concurrency}] = g
		}
	}
	div := func(a, b float64) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, rt := range r.Options.Runtimes[1:] {
		fmt.Fprintf(w, "Ratios %s / %s (same run):\n\n", rt, base)
		fmt.Fprintln(w, "| mode | concurrency | p50 | p99 | req/s | CPU/run |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		for _, g := range r.Gateway {
			b, ok := first[key{g.Mode, g.Concurrency}]
			if g.Runtime != rt || g.Language != sandbox.LanguagePython || !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", g.Mode, g.Concurrency, div(float64(g.P50), float64(b.P50)), div(float64(g.P99), float64(b.P99)),
				div(g.RPS, b.RPS), div(float64(g.CPUPerRun), float64(b.CPUPerRun)))
		}
		fmt.Fprintln(w)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func mib(kb int64) string       { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// Command renders the flags that reproduce a run.
func (o Options) Command() string {
	var b strings.Builder
	b.WriteString("execgate bench")
	fmt.Fprintf(&b, " --runs %d --requests %d --warm-pool %d --concurrency ", o.Runs, o.Requests, o.WarmPool)
	for i, c := range o.Concurrency {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, c)
	}
	if o.BridgeCalls > 0 && o.BridgeCalls != 500 {
		fmt.Fprintf(&b, " --bridge-calls %d", o.BridgeCalls)
	}
	if len(o.Sections) > 0 && len(o.Sections) < len(AllSections) {
		b.WriteString(" --sections " + strings.Join(o.Sections, ","))
	}
	if len(o.Modes) > 0 && len(o.Modes) < len(AllModes) {
		b.WriteString(" --modes " + strings.Join(o.Modes, ","))
	}
	if len(o.Languages) > 0 && len(o.Languages) < len(AllLanguages) {
		b.WriteString(" --languages " + strings.Join(o.Languages, ","))
	}
	if len(o.Runtimes) > 0 {
		b.WriteString(" --runtimes " + strings.Join(o.Runtimes, ","))
	}
	if len(o.Snekbox) > 0 {
		b.WriteString(" --snekbox '" + strings.Join(o.Snekbox, " ") + "'")
	}
	return b.String()
}

// JSONRow is one measured row of a report, for comparing runs (and other
// systems) side by side: `execgate bench --json`.
type JSONRow struct {
	Name        string  `json:"name"`
	Language    string  `json:"language,omitempty"`
	Runtime     string  `json:"runtime,omitempty"`
	Isolation   string  `json:"isolation,omitempty"`
	Concurrency int     `json:"concurrency"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms,omitempty"`
	RPS         float64 `json:"rps,omitempty"`
	CPUPerRunMS float64 `json:"cpu_per_run_ms,omitempty"`
	Errors      int     `json:"errors"`
}

// JSON writes every row of the report as one JSON document.
func (r *Report) JSON(w io.Writer) error {
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rows := []JSONRow{}
	for _, s := range r.Startup {
		rows = append(rows, JSONRow{Name: "startup: " + s.Name, Runtime: s.Runtime, Concurrency: 1, P50MS: msf(s.Wall.Median), CPUPerRunMS: msf(s.CPU.Median)})
	}
	for _, g := range r.Gateway {
		rows = append(rows, JSONRow{Name: "gateway " + g.Mode, Language: g.Language, Runtime: g.Runtime, Isolation: g.Isolation, Concurrency: g.Concurrency,
			P50MS: msf(g.P50), P99MS: msf(g.P99), RPS: g.RPS, CPUPerRunMS: msf(g.CPUPerRun), Errors: g.Errors})
	}
	for _, o := range r.Overhead {
		rows = append(rows, JSONRow{Name: "gateway overhead (no-op executor)", Concurrency: o.Concurrency,
			P50MS: msf(o.P50), P99MS: msf(o.P99), RPS: o.RPS, Errors: o.Errors})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"started": r.Started, "host": r.Host, "command": r.Options.Command(), "rows": rows})
}

// writeRows writes a flood's table (header and rows), its 200 answers
// named by ok.
func (o FloodStats) writeRows(w io.Writer, ok string) {
	fmt.Fprintln(w, "| what | value |")
	fmt.Fprintln(w, "|---|---:|")
	fmt.Fprintf(w, "| gateway RSS idle, before | %s |\n", mib(o.IdleKB))
	fmt.Fprintf(w, "| gateway RSS peak, during | %s |\n", mib(o.PeakKB))
	fmt.Fprintf(w, "| gateway RSS %s after the last answer | %s |\n", afterFlood, mib(o.AfterKB))
	fmt.Fprintf(w, "| largest response body | %.1f MiB |\n", float64(o.MaxBodyBytes)/(1<<20))
	fmt.Fprintf(w, "| answers: %s / 503 Overloaded / other | %d / %d / %d |\n", ok, o.OK, o.Overloaded, o.Errors)
	fmt.Fprintf(w, "| wall time, all runs | %s |\n", ms(o.Wall))
}
