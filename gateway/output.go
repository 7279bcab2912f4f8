package gateway

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
)

// A client must take a response at least this fast (after a grace
// period): a caller that stops reading would otherwise hold its run's
// output memory, and with it other tenants' runs, for as long as it likes.
// The same bound holds for every response that carries tool output: an
// execute response, a stored result (GET /v1/executions/{id}) and each
// write of an event stream.
var (
	writeGrace   = 10 * time.Second
	minWriteRate = 1 << 20 // bytes per second
)

// writeDeadline is when size bytes written from now must have been taken.
func writeDeadline(size int) time.Time {
	return time.Now().Add(writeGrace + time.Duration(size)*time.Second/time.Duration(minWriteRate))
}

// writeEnvelope writes the response of an execute request, within
// writeGrace plus its size at minWriteRate; a client that reads slower
// loses the connection.
func writeEnvelope(c *gin.Context, status int, e *execution.EncodedEnvelope) {
	writeBounded(c, status, e.Size(), e.Write)
}

// writeBounded writes a JSON response of size bytes with write, within
// writeDeadline(size).
func writeBounded(c *gin.Context, status, size int, write func(io.Writer) error) {
	writeBoundedAs(c, status, "application/json; charset=utf-8", size, write)
}

// writeBoundedAs is writeBounded for a body of another media type.
func writeBoundedAs(c *gin.Context, status int, contentType string, size int, write func(io.Writer) error) {
	c.Header("Content-Type", contentType)
	c.Header("Content-Length", strconv.Itoa(size))
	c.Status(status)
	rc := http.NewResponseController(c.Writer)
	set := rc.SetWriteDeadline(writeDeadline(size)) == nil
	// An error here is the client gone or too slow; there is no one left
	// to tell. The deadline then stays, so the server's last flush fails
	// fast too; after a good write it is cleared for the next request on
	// the connection.
	if err := write(c.Writer); err == nil && set {
		_ = rc.SetWriteDeadline(time.Time{})
	}
}
