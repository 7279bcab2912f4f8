package toolbridge

import (
	"context"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// What a run pays for its bridge requests (code mode). The kernel measures
// the jail's CPU; the gateway's work for the jail's requests (reading and
// decoding frames, governing, the MCP session, encoding the answers,
// recording) is charged on top, to the tenant's daily CPU budget, as
// sandbox.Usage.BridgeCPUMS. Every request pays, answered or refused: a
// refused request costs the gateway too.
//
// A search's scan of the tool lists is measured (the thread's CPU clock
// while it scans: its cost grows with the tenant's tools and the query);
// the rest is spread over goroutines the run does not own (frame reader,
// MCP session, encoders) and is charged at fixed prices, calibrated
// through the real gateway, nsjail and an MCP server in a process of its
// own. On a 2-core host the gateway spent per request: a search or
// describe 70–150 µs, a call refused before the server ~115 µs, a call
// answered by the server ~1.6 ms, and about 16 µs per KiB of request and
// 80 µs per KiB of result (TestCodeModeBridgeChargeCoversTheGatewaysCPU
// measures it again and checks the charge covers it).
const (
	// RequestCPU is charged for every request: search, describe or run.
	RequestCPU = 250 * time.Microsecond
	// CallCPU is charged, on top, for a call sent to its tool server.
	CallCPU = 2 * time.Millisecond
	// RequestKiBCPU is charged per KiB of request frame (as the jail sent
	// it) and of a search's or describe's answer.
	RequestKiBCPU = 20 * time.Microsecond
	// ResultKiBCPU is charged per KiB of a call's result.
	ResultKiBCPU = 100 * time.Microsecond
)

// perKiB is price for each KiB of n bytes (pro rata).
func perKiB(n int, price time.Duration) time.Duration {
	return time.Duration((int64(n)*int64(price) + 1023) / 1024)
}

// requestBytes is the size of the request frame being served (what the
// jail sent, as the sandbox or the dispatcher read it), or fallback when
// the caller did not say.
func requestBytes(ctx context.Context, fallback int) int {
	if n := sandbox.RequestBytes(ctx); n > 0 {
		return n
	}
	return fallback
}

// charge adds d to the run's charge.
func (r *Run) charge(d time.Duration) {
	r.mu.Lock()
	r.charged += d
	r.mu.Unlock()
}

// ChargedCPUMS is the gateway CPU charged to the run for its bridge
// requests so far, in whole milliseconds rounded up.
func (r *Run) ChargedCPUMS() int64 {
	r.mu.Lock()
	d := r.charged
	r.mu.Unlock()
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
