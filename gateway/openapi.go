package gateway

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"gopkg.in/yaml.v3"
)

// openAPIYAML is the hand-written OpenAPI 3.1 document of every route,
// request, response and error. Tests keep it honest: every registered route
// must be in it, and real responses must validate against it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

var (
	openAPIOnce sync.Once
	openAPIDoc  []byte
	openAPIErr  error
)

// OpenAPI returns the OpenAPI document as JSON.
func OpenAPI() ([]byte, error) {
	openAPIOnce.Do(func() {
		var doc any
		if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
			openAPIErr = fmt.Errorf("parsing openapi.yaml: %w", err)
			return
		}
		openAPIDoc, openAPIErr = json.Marshal(doc)
		if openAPIErr != nil {
			openAPIErr = fmt.Errorf("encoding openapi.yaml as JSON: %w", openAPIErr)
		}
	})
	return openAPIDoc, openAPIErr
}

func (s *Server) handleOpenAPI(c *gin.Context) {
	doc, err := OpenAPI()
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", doc)
}
