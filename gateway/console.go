package gateway

import (
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/console"
)

var consoleHandler = console.Handler()

// serveConsole serves the web console (package console) for /ui and
// /ui/..., and its icon at /favicon.ico: static files outside the API, so
// they are not routes of the access table or the OpenAPI document. It
// reports whether it did.
func serveConsole(c *gin.Context) bool {
	p := c.Request.URL.Path
	if p != "/ui" && p != console.FaviconPath && !strings.HasPrefix(p, console.Prefix) {
		return false
	}
	consoleHandler.ServeHTTP(c.Writer, c.Request)
	return true
}
