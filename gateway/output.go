package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
)

// A client must take a response at least this fast (after a grace
// period): a caller that stops reading would otherwise hold its run's
// output memory, and with it other tenants' runs, for as long as it likes.
var (
	writeGrace   = 10 * time.Second
	minWriteRate = 1 << 20 // bytes per second
)

// writeEnvelope writes the response of an execute request, within
// writeGrace plus its size at minWriteRate; a client that reads slower
// loses the connection.
func writeEnvelope(c *gin.Context, status int, e *execution.EncodedEnvelope) {
	c.Header("Content-Type", "application/json; charset=utf-8")
	c.Header("Content-Length", strconv.Itoa(e.Size()))
	c.Status(status)
	deadline := time.Now().Add(writeGrace + time.Duration(e.Size())*time.Second/time.Duration(minWriteRate))
	rc := http.NewResponseController(c.Writer)
	set := rc.SetWriteDeadline(deadline) == nil
	// An error here is the client gone or too slow; there is no one left
	// to tell. The deadline then stays, so the server's last flush fails
	// fast too; after a good write it is cleared for the next request on
	// the connection.
	if err := e.Write(c.Writer); err == nil && set {
		_ = rc.SetWriteDeadline(time.Time{})
	}
}
