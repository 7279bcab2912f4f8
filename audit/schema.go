package audit

import (
	_ "embed"
	"slices"
)

// SchemaID is the $id of the Record JSON Schema for SchemaVersion.
const SchemaID = "https://execgate.dev/schemas/audit/record.v1.json"

//go:embed schema/record.v1.json
var schemaV1 []byte

// Schema returns the JSON Schema (draft 2020-12) of Record, version
// SchemaVersion, as stored in audit/schema/record.v1.json.
func Schema() []byte { return slices.Clone(schemaV1) }
