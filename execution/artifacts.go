package execution

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
)

// Input files and artifacts (issue #24) in the flow:
//
//   - a request's files are checked against the decided limits.files and
//     limits.files_bytes once the policy has spoken (413 naming the file
//     that goes over; the decoder has checked paths and the platform's
//     maxima already);
//   - a run's artifacts come back in its Result; the envelope lists each
//     (name, bytes, mime, sha256) and carries the bytes of the small ones
//     (base64, each at most Config.ArtifactsInlineBytes, all together at
//     most the run's output_bytes), and the flow hands all of them to the
//     artifact store (Deps.Artifacts) before it answers, for GET
//     /v1/executions/{id}/artifacts/{name}, sync and async runs alike;
//   - the memory a run's artifacts take in this process counts against its
//     output reservation (artifactReservation).

// ArtifactStore keeps runs' artifacts for their readers (the async
// store: async.MemoryStore, async.RedisStore), per tenant and execution,
// within its own per-tenant bounds.
type ArtifactStore interface {
	PutArtifacts(ctx context.Context, tenantID, executionID string, arts []sandbox.Artifact) error
}

// DefaultArtifactsInlineBytes is Config.ArtifactsInlineBytes's default.
const DefaultArtifactsInlineBytes = 64 << 10

// EnvelopeArtifact is one artifact as the caller sees it: its bytes are
// retrievable with GET /v1/executions/{id}/artifacts/{name}; a small one
// carries them here too, base64.
type EnvelopeArtifact struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	MIME   string `json:"mime"`
	SHA256 string `json:"sha256"`
	// Base64 is the artifact's bytes when it is at most the inline cap
	// (and the envelope's inline bytes stay within the run's
	// output_bytes); absent otherwise.
	Base64 *string `json:"base64,omitempty"`
}

// EnvelopeArtifacts lists arts for the envelope, inlining each of at most
// inlineMax bytes (-1: none) while the inlined bytes stay within budget,
// in order.
func EnvelopeArtifacts(arts []sandbox.Artifact, inlineMax, budget int64) []EnvelopeArtifact {
	if len(arts) == 0 {
		return nil
	}
	out := make([]EnvelopeArtifact, len(arts))
	for i, a := range arts {
		out[i] = EnvelopeArtifact{Name: a.Name, Bytes: a.Bytes, MIME: a.MIME, SHA256: a.SHA256}
		if a.Bytes <= inlineMax && a.Bytes <= budget && int64(len(a.Data)) == a.Bytes {
			s := base64.StdEncoding.EncodeToString(a.Data)
			out[i].Base64 = &s
			budget -= a.Bytes
		}
	}
	return out
}

// artifactReservation is what a run with limits l may hold of artifacts in
// this process beyond its output (outputReservation): their bytes as
// collected, and once more as the store is handed them (a Redis command),
// plus the inlined ones (at most output_bytes) as base64 in the envelope
// and in the encoding buffer.
func artifactReservation(l sandbox.Limits) int64 {
	return 2*l.ArtifactsBytes + 4*min(l.OutputBytes, l.ArtifactsBytes)
}

// checkFiles refuses a request whose input files are more, or larger,
// than the decided limits allow: 413 naming the file that goes over.
func checkFiles(files []sandbox.File, l sandbox.Limits) error {
	if int64(len(files)) > l.Files {
		f := files[l.Files]
		return Oversize(fmt.Sprintf("files[%d] (%q)", l.Files, f.Path), "is one file more than the %d the policy allows this run (limits.files)", l.Files)
	}
	var total int64
	for i, f := range files {
		total += int64(len(f.Content))
		if total > l.FilesBytes {
			return Oversize(fmt.Sprintf("files[%d] (%q)", i, f.Path), "brings the files to %d bytes, over the %d the policy allows this run (limits.files_bytes)", total, l.FilesBytes)
		}
	}
	return nil
}

// keepArtifacts hands a run's artifacts to the artifact store. A store
// that fails is logged: the run happened and its envelope stands (its
// small artifacts are inline), but GET of its artifacts will be 404.
func (f *Flow) keepArtifacts(ctx context.Context, x *state, tenantID string, arts []sandbox.Artifact) {
	if len(arts) == 0 || f.d.Artifacts == nil {
		return
	}
	if err := f.d.Artifacts.PutArtifacts(context.WithoutCancel(ctx), tenantID, x.id, arts); err != nil {
		f.log.ErrorContext(ctx, "the artifacts of a run could not be stored", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, tenantID, "artifacts", len(arts), "err", err)
	}
}

// auditFiles are the input files as the audit record has them: path,
// size and SHA-256.
func auditFiles(files []sandbox.File) []audit.File {
	if len(files) == 0 {
		return nil
	}
	out := make([]audit.File, len(files))
	for i, f := range files {
		sum := sha256.Sum256(f.Content)
		out[i] = audit.File{Path: f.Path, Bytes: int64(len(f.Content)), SHA256: hex.EncodeToString(sum[:])}
	}
	return out
}

// auditArtifacts are a run's artifacts as the audit record has them.
func auditArtifacts(arts []sandbox.Artifact) []audit.Artifact {
	if len(arts) == 0 {
		return nil
	}
	out := make([]audit.Artifact, len(arts))
	for i, a := range arts {
		out[i] = audit.Artifact{Name: a.Name, Bytes: a.Bytes, SHA256: a.SHA256, MIME: a.MIME}
	}
	return out
}
