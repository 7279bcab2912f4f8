// Package audittest checks audit records in tests: it compiles the embedded
// JSON Schema with a real validator (format assertions on) and reads audit
// files, rotated backups included, validating every line.
package audittest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/execgate/execgate/audit"
)

// Schema compiles audit.Schema() (checked against the draft 2020-12
// metaschema) or fails the test.
func Schema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	sch, err := Compile()
	if err != nil {
		t.Fatalf("compiling audit schema: %v", err)
	}
	return sch
}

// Compile compiles audit.Schema() with format assertions on.
func Compile() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(audit.Schema()))
	if err != nil {
		return nil, fmt.Errorf("parsing schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(audit.SchemaID, doc); err != nil {
		return nil, fmt.Errorf("adding schema: %w", err)
	}
	return c.Compile(audit.SchemaID)
}

// ValidateLine validates one JSON line against sch; the error lists every
// violation with its instance location.
func ValidateLine(sch *jsonschema.Schema, line []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("parsing record: %w", err)
	}
	return sch.Validate(inst)
}

// Line is one line of an audit file.
type Line struct {
	File   string
	Number int // 1-based
	Raw    []byte
	Record audit.Record
}

// ReadFile returns every record of the audit log at path, rotated backups
// first (oldest first), failing the test on any line that does not validate
// against the schema or does not decode strictly into audit.Record.
func ReadFile(t testing.TB, path string) []Line {
	t.Helper()
	sch := Schema(t)
	backups, err := audit.Backups(path)
	if err != nil {
		t.Fatalf("listing backups: %v", err)
	}
	var out []Line
	for _, file := range append(backups, path) {
		lines, err := readLines(file)
		if err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		for i, raw := range lines {
			if err := ValidateLine(sch, raw); err != nil {
				t.Fatalf("%s:%d does not validate against the audit schema: %v\n%s", file, i+1, err, raw)
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			var r audit.Record
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("%s:%d does not decode into audit.Record: %v", file, i+1, err)
			}
			out = append(out, Line{File: file, Number: i + 1, Raw: raw, Record: r})
		}
	}
	return out
}

func readLines(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var lines [][]byte
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	return lines, sc.Err()
}
