package dispatch

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every message of a run after its job — the executor's start request and
// the gateway's confirmation, tool-call requests and answers, live-output
// chunks — is signed like the job and the reply (HMAC-SHA256), under a key
// of the run's own: HMAC(spec key, "run-key" domain || run id). Each names
// the run, the executor the gateway confirmed and a sequence number, so a
// value written into the run's lists by anyone without the spec key is
// refused, and so is a genuine frame replayed into another run, from
// another executor or a second time (bridge requests: each number once;
// output: numbers only rise). The gateway records each refusal in
// P:dispatch:refused (frame, reason) and its log.

const (
	domainRunKey       = "execgate-dispatch-run-key-v1\n"
	domainStart        = "execgate-dispatch-start-v1\n"
	domainConfirm      = "execgate-dispatch-confirm-v1\n"
	domainBridgeReq    = "execgate-dispatch-bridge-request-v1\n"
	domainBridgeAnswer = "execgate-dispatch-bridge-answer-v1\n"
	domainOutput       = "execgate-dispatch-output-v1\n"
)

// forRun is the signer of run runID's frames.
func (s signer) forRun(runID string) signer {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(domainRunKey))
	m.Write([]byte(runID))
	return signer{m.Sum(nil)}
}

// frameHead is what every frame carries: whose run, from (or for) which
// executor, and its sequence number.
type frameHead struct {
	RunID    string `json:"run_id"`
	Executor string `json:"executor"`
	Seq      uint64 `json:"seq,omitempty"`
}

// startFrame asks the run's gateway to confirm that this executor, and no
// other, runs it (executor → gateway, on {R}:start).
type startFrame struct {
	frameHead
	// SecretsKey is the executor's ephemeral X25519 public key for a run
	// with secrets (secrets.go); absent otherwise.
	SecretsKey []byte `json:"secrets_key,omitempty"`
}

// confirmFrame is the gateway's answer to a start frame (gateway →
// executor, on {R}:confirm:EXECUTOR): OK runs it, anything else never.
type confirmFrame struct {
	frameHead
	OK bool `json:"ok"`
	// Secrets are the run's secret values sealed for this executor
	// (secrets.go), with an OK for a run with secrets.
	Secrets *sealedSecrets `json:"secrets,omitempty"`
}

// push appends v to the list key and (re)sets its TTL, in one transaction.
func push(ctx context.Context, rdb redis.UniversalClient, key, v string, ttl time.Duration) error {
	pipe := rdb.TxPipeline()
	pipe.RPush(ctx, key, v)
	pipe.Expire(ctx, key, ttl)
	_, err := pipe.Exec(ctx)
	return err
}

// sealFrame encodes and signs v under domain.
func sealFrame(s signer, domain string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding a frame: %w", err)
	}
	return s.seal(domain, b), nil
}

var errFrameTooLarge = errors.New("frame too large")

// openFrame checks raw (at most max bytes) under domain and decodes it
// into v.
func openFrame(s signer, domain, raw string, max int, v any) error {
	if len(raw) > max+2*sha256.Size+len(sigSep) {
		return errFrameTooLarge
	}
	payload, err := s.open(domain, raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return errors.New("malformed frame")
	}
	return nil
}

// checkHead: the frame is run's, and from (or for) executor.
func (h frameHead) check(runID, executor string) error {
	if h.RunID != runID {
		return errors.New("frame of another run")
	}
	if h.Executor != executor {
		return errors.New("frame of another executor")
	}
	return nil
}

// seqWindow refuses a sequence number seen before (bridge requests, which
// several threads of one run may send out of order). It remembers the
// last seqWindowSize numbers; older ones are refused outright.
type seqWindow struct {
	hi   uint64
	seen map[uint64]struct{}
}

const seqWindowSize = 1024

func (w *seqWindow) take(n uint64) error {
	switch {
	case n == 0:
		return errors.New("no sequence number")
	case w.hi >= seqWindowSize && n <= w.hi-seqWindowSize:
		return errors.New("sequence number too old (a replay)")
	}
	if _, dup := w.seen[n]; dup {
		return errors.New("sequence number already used (a replay)")
	}
	if w.seen == nil {
		w.seen = map[uint64]struct{}{}
	}
	w.seen[n] = struct{}{}
	w.hi = max(w.hi, n)
	if len(w.seen) > 2*seqWindowSize && w.hi >= seqWindowSize {
		for k := range w.seen {
			if k <= w.hi-seqWindowSize {
				delete(w.seen, k)
			}
		}
	}
	return nil
}
