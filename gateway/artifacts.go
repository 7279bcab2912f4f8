package gateway

import (
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/sandbox/workspace"
)

// handleArtifact is GET /v1/executions/{id}/artifacts/{name}: one artifact
// of a run (sync or async) of the caller's tenant, as kept in the async
// store for server.async_result_ttl_seconds. It is one of the tenant's
// server.tenant_max_result_readers, its bytes shared between concurrent
// readers (copied out of Redis once, within the output memory budget) and
// written within the slow-reader deadline of their size, as stored
// results are (readers.go). Another tenant's artifact, and one that was
// never kept or is gone, is 404.
func (s *Server) handleArtifact(c *gin.Context) {
	name := c.Param("name")
	if workspace.CheckName(name) != nil {
		if _, err := s.executionKey(c); err != nil {
			s.fail(c, err) // a tenant the caller may not name: 403 first
			return
		}
		s.fail(c, errNoArtifact)
		return
	}
	k, done, ok := s.resultReader(c)
	if !ok {
		return
	}
	defer done()
	a, release, ok, err := s.runs.Store().Artifact(c.Request.Context(), k, name, s.flow.ReserveOutput)
	switch {
	case err != nil:
		s.fail(c, err)
		return
	case !ok:
		s.fail(c, errNoArtifact)
		return
	}
	defer release()
	typ := a.MIME
	if workspace.CheckMIME(typ) != nil {
		typ = workspace.DefaultMIME
	}
	h := c.Writer.Header()
	h.Set("Content-Disposition", contentDisposition(name))
	h.Set("X-Content-Type-Options", "nosniff")
	// Served from the API's origin: never as a page that runs anything.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "private, no-store")
	h.Set("X-Artifact-Sha256", a.SHA256)
	writeBoundedAs(c, http.StatusOK, typ, len(a.Data), func(w io.Writer) error {
		_, err := w.Write(a.Data)
		return err
	})
}

// errNoArtifact is every artifact lookup that finds nothing the caller may
// see.
var errNoArtifact = &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "no such artifact"}

// contentDisposition is "attachment" with name as the file name: an ASCII
// fallback (anything else as "_") in filename, and the name itself
// (RFC 5987, UTF-8, percent-encoded) in filename*. Names are
// workspace.CheckName's: no control characters, slashes or backslashes.
func contentDisposition(name string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" && !strings.Contains(v, "filename*") {
		return v
	}
	fallback := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' || r == '%' {
			return '_'
		}
		return r
	}, name)
	return `attachment; filename="` + fallback + `"; filename*=UTF-8''` + pctEncode(name)
}

// pctEncode is RFC 5987's attr-char encoding of s.
func pctEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("!#$&+-.^_`|~", c) >= 0:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}
