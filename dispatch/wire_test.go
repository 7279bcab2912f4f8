package dispatch

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// Every field of sandbox.Spec but the live hooks (Bridge, Output) crosses
// the wire (Secrets by name: their values go sealed, secrets.go): a
// field added to the spec and forgotten here would silently be dropped
// between gateway and executor (the decided isolation level once was).
func TestWireSpecCarriesEverySpecField(t *testing.T) {
	var in sandbox.Spec
	v := reflect.ValueOf(&in).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch {
		case name == "Bridge", name == "Output":
		case name == "Deps": // a directory of the gateway's host: the executor installs the Lock
		case name == "Secrets":
			f.Set(reflect.ValueOf([]secrets.Value{secrets.NewValue("API_KEY", "the-value-stays-off-the-wire")}))
		case f.Kind() == reflect.String:
			f.SetString("x-" + name)
		case f.Type() == reflect.TypeOf(json.RawMessage(nil)):
			f.Set(reflect.ValueOf(json.RawMessage(`{"f":"` + name + `"}`)))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.ValueOf([]string{"x-" + name}))
		case f.Kind() == reflect.Struct && name == "Limits":
			f.Set(reflect.ValueOf(sandbox.Limits{TimeoutMS: 1, CPUMS: 2, MemoryMB: 3, Pids: 4, OutputBytes: 5, TmpMB: 6,
				Files: 7, FilesBytes: 8, Artifacts: 9, ArtifactsBytes: 10}))
		case name == "Files":
			f.Set(reflect.ValueOf([]sandbox.File{{Path: "data/in.csv", Content: []byte{0, 1, 0xff}}}))
		default:
			t.Fatalf("sandbox.Spec.%s (%s): teach this test to fill it, and the wire to carry it", name, f.Type())
		}
	}
	raw, err := json.Marshal(wireSpec(in))
	if err != nil {
		t.Fatal(err)
	}
	var w WireSpec
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "the-value-stays-off-the-wire") || !reflect.DeepEqual(w.Secrets, []string{"API_KEY"}) {
		t.Errorf("the secrets on the wire: %s", raw)
	}
	in.Secrets = nil // the executor fills them from the sealed confirmation
	if out := w.spec(); !reflect.DeepEqual(out, in) {
		t.Errorf("through the wire:\n got %+v\nwant %+v", out, in)
	}
}
