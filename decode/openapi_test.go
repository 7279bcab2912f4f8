package decode_test

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/gateway"
)

// TestRequestSchemasNameEveryDecodedField holds the OpenAPI document's
// request bodies to the decoders: a field the gateway takes must be a
// property of the body's schema (these have additionalProperties: false,
// so a client generated from the document could not send it otherwise),
// and every property must be a field the gateway takes. The client SDKs'
// drift tests read the same schemas.
func TestRequestSchemasNameEveryDecodedField(t *testing.T) {
	raw, err := gateway.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	type operation struct {
		OperationID string `json:"operationId"`
		RequestBody struct {
			Content map[string]struct {
				Schema struct {
					Ref string `json:"$ref"`
				} `json:"schema"`
			} `json:"content"`
		} `json:"requestBody"`
	}
	var doc struct {
		Paths map[string]struct {
			Post *operation `json:"post"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	decoded := decode.RequestFields()
	for op, fields := range decoded {
		var ref string
		for _, item := range doc.Paths {
			if o := item.Post; o != nil && o.OperationID == op {
				ref = o.RequestBody.Content["application/json"].Schema.Ref
			}
		}
		if !strings.HasPrefix(ref, "#/components/schemas/") {
			t.Errorf("operation %s: no request body schema reference (%q)", op, ref)
			continue
		}
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		var props []string
		for p := range doc.Components.Schemas[name].Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		sort.Strings(fields)
		for _, f := range fields {
			if !slices.Contains(props, f) {
				t.Errorf("%s (%s): the gateway takes %q but the schema lacks it", op, name, f)
			}
		}
		for _, p := range props {
			if !slices.Contains(fields, p) {
				t.Errorf("%s (%s): the schema has %q but the gateway does not take it", op, name, p)
			}
		}
	}
}
