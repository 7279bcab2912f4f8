package mcpserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execgate/execgate/execution"
)

// A run's artifacts in an execute tool result (issue #24): the envelope
// (structuredContent) lists them all, as over HTTP; besides, each image the
// envelope carries inline (base64: at most server.artifacts_inline_bytes,
// all of them within the run's output_bytes) is an MCP image content, so
// the agent sees a chart it asked for, and the text part names every
// artifact with its size, type and where to fetch it. Nothing is read from
// the artifact store: what an MCP result holds is bounded by what the
// envelope already holds.

// maxArtifactLines bounds the artifacts the text part names (the envelope
// lists them all, within limits.artifacts).
const maxArtifactLines = 32

// imageSignatures are the raster formats an artifact is sent as image
// content in, by media type, with the bytes such a file starts with. The
// media type is the tool's (or its name's) and is never sniffed, but an
// image is sent only when its bytes agree with it, so a client is never
// handed an image it cannot decode. SVG is not among them: it is a
// document (scripts, links) more than an image, and stays an artifact.
var imageSignatures = map[string][][]byte{
	"image/png":  {[]byte("\x89PNG\r\n\x1a\n")},
	"image/jpeg": {[]byte("\xff\xd8\xff")},
	"image/gif":  {[]byte("GIF87a"), []byte("GIF89a")},
	"image/webp": {[]byte("RIFF")}, // and "WEBP" at offset 8, checked in imageBytes
}

// artifactContent is what an execute result adds for env's artifacts: the
// image contents, and the text naming every artifact ("" for none).
func artifactContent(env *execution.Envelope) ([]mcp.Content, string) {
	if len(env.Artifacts) == 0 && env.Truncated.ArtifactsDropped == 0 {
		return nil, ""
	}
	var images []mcp.Content
	var b strings.Builder
	fmt.Fprintf(&b, "artifacts (%d; each: GET /v1/executions/%s/artifacts/{name}):", len(env.Artifacts), env.ExecutionID)
	for i, a := range env.Artifacts {
		data, shown, why := imageBytes(a)
		if shown {
			images = append(images, &mcp.ImageContent{Data: data, MIMEType: a.MIME})
		}
		if i >= maxArtifactLines {
			continue
		}
		fmt.Fprintf(&b, "\n  %s (%d bytes, %s)", a.Name, a.Bytes, a.MIME)
		switch {
		case shown:
			b.WriteString(": shown as an image")
		case why != "":
			b.WriteString(": " + why)
		}
	}
	if n := len(env.Artifacts) - maxArtifactLines; n > 0 {
		fmt.Fprintf(&b, "\n  and %d more (listed in the envelope)", n)
	}
	if n := env.Truncated.ArtifactsDropped; n > 0 {
		fmt.Fprintf(&b, "\n%d files of /workspace/out were not collected (truncated.artifacts says why)", n)
	}
	return images, b.String()
}

// imageBytes returns a's bytes when it is sent as image content; else why
// not, for an image ("" for an artifact that is not one).
func imageBytes(a execution.EnvelopeArtifact) ([]byte, bool, string) {
	sigs, raster := imageSignatures[a.MIME]
	switch {
	case !strings.HasPrefix(a.MIME, "image/"):
		return nil, false, ""
	case !raster:
		return nil, false, "not sent as an image (only PNG, JPEG, GIF and WebP are)"
	case a.Base64 == nil:
		return nil, false, "too large to carry inline (server.artifacts_inline_bytes, or the run's output_bytes): fetch it"
	}
	data, err := base64.StdEncoding.DecodeString(*a.Base64)
	if err != nil {
		return nil, false, "its inline bytes do not decode"
	}
	for _, sig := range sigs {
		if bytes.HasPrefix(data, sig) && (a.MIME != "image/webp" || len(data) >= 12 && string(data[8:12]) == "WEBP") {
			return data, true, ""
		}
	}
	return nil, false, "its bytes are not a " + strings.ToUpper(strings.TrimPrefix(a.MIME, "image/")) + " image: not shown"
}
