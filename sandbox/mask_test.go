package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/secrets"
)

// maskExempt are the string fields of a Result a tool cannot put text in:
// decided by the runner, the kernel or the gateway, from closed sets.
var maskExempt = map[string]bool{
	"Result.Status": true, "Result.NsjailLog": true, "Result.DeniedSyscall": true,
	"ErrorInfo.Type": true, "Usage.Isolation": true, "EgressAttempt.IP": true,
	// The runtime that ran the run: set by package runtimes from its own
	// names (a runtime of the lock, or deno).
	"Usage.Runtime":       true,
	"ToolCall.DecisionID": true, "ToolCall.ArgsSHA256": true,
	// Computed by the runner from the artifact's content (masked: see
	// TestMaskResultMasksArtifacts).
	"Artifact.SHA256": true,
}

// TestMaskResultCoversEveryToolControlledField puts the secret in every
// string (and JSON) field of a Result, at any depth, and finds none of it
// after MaskResult but in the fields a tool cannot write. A field added to
// Result that a tool controls fails here until MaskResult masks it (or it
// is exempted above, for a field a tool cannot write).
func TestMaskResultCoversEveryToolControlledField(t *testing.T) {
	const secret = "tok-3ZqL9-every-field"
	var filled []string
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x " + secret)
			filled = append(filled, path)
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if f.IsExported() {
					fill(v.Field(i), v.Type().Name()+"."+f.Name)
				}
			}
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), path)
		case reflect.Slice:
			if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
				v.SetBytes([]byte(`{"k":"x ` + secret + `"}`))
				filled = append(filled, path)
				return
			}
			s := reflect.MakeSlice(v.Type(), 1, 1)
			fill(s.Index(0), path)
			v.Set(s)
		}
	}
	var res Result
	fill(reflect.ValueOf(&res).Elem(), "Result")
	MaskResult(&res, secrets.NewMasker([]secrets.Value{secrets.NewValue("K", secret)}))
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.String:
			if strings.Contains(v.String(), secret) != maskExempt[path] {
				t.Errorf("%s = %q after MaskResult", path, v.String())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					check(v.Field(i), v.Type().Name()+"."+f.Name)
				}
			}
		case reflect.Pointer:
			check(v.Elem(), path)
		case reflect.Slice:
			if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
				if strings.Contains(string(v.Bytes()), secret) != maskExempt[path] {
					t.Errorf("%s = %s after MaskResult", path, v.Bytes())
				}
				return
			}
			for i := range v.Len() {
				check(v.Index(i), path)
			}
		}
	}
	check(reflect.ValueOf(res), "Result")
	if len(filled) < 15 {
		t.Fatalf("filled only %v", filled)
	}
	// A nil masker changes nothing.
	before := res
	MaskResult(&res, nil)
	if !reflect.DeepEqual(before, res) {
		t.Error("a nil Masker changed the Result")
	}
}

// An artifact's content, name and media type are masked like the rest of
// a Result: its size and SHA-256 follow the masked content, an artifact
// whose masked name repeats another's is dropped saying why, the names of
// the files not collected are masked, and the Result handed in is not
// changed.
func TestMaskResultMasksArtifacts(t *testing.T) {
	const secret, other = "sk_live_artifact-42", "hunter2-other"
	m := secrets.NewMasker([]secrets.Value{secrets.NewValue("KEY", secret), secrets.NewValue("OTHER", other)})
	art := func(name, mime, data string) Artifact {
		sum := sha256.Sum256([]byte(data))
		return Artifact{Name: name, MIME: mime, Data: []byte(data), Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	}
	clean := art("clean.txt", "text/plain", "nothing to hide")
	in := Result{
		Artifacts: []Artifact{
			art("a-"+secret+".csv", "text/csv", "key,"+secret+"\n"),
			art("a-"+other+".csv", "text/csv", "x"),
			art("b.bin", secret+"/x", "line\n"+secret+"\n"),
			clean,
		},
		Truncated: Truncated{Artifacts: []DroppedArtifact{{Name: secret, Reason: workspace.ReasonFIFO}}, ArtifactsDropped: 1},
	}
	orig := make([]Artifact, len(in.Artifacts))
	copy(orig, in.Artifacts)
	res := in
	MaskResult(&res, m)

	want := func(a Artifact, name, mime, data string) {
		t.Helper()
		sum := sha256.Sum256([]byte(data))
		if a.Name != name || a.MIME != mime || string(a.Data) != data || a.Bytes != int64(len(data)) || a.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("got %+v (data %q), want name %q, mime %q, data %q with its size and sha256", a, a.Data, name, mime, data)
		}
	}
	if len(res.Artifacts) != 3 {
		t.Fatalf("artifacts %+v, want 3 (the repeated masked name dropped)", res.Artifacts)
	}
	want(res.Artifacts[0], "a-***.csv", "text/csv", "key,***\n")
	want(res.Artifacts[1], "b.bin", workspace.DefaultMIME, "line\n***\n")
	if !reflect.DeepEqual(res.Artifacts[2], clean) {
		t.Errorf("an artifact without the secret changed: %+v", res.Artifacts[2])
	}
	wantDropped := []DroppedArtifact{{Name: "***", Reason: workspace.ReasonFIFO}, {Name: "a-***.csv", Reason: ReasonMaskedName}}
	if !reflect.DeepEqual(res.Truncated.Artifacts, wantDropped) || res.Truncated.ArtifactsDropped != 2 {
		t.Errorf("truncated %+v", res.Truncated)
	}
	if !reflect.DeepEqual(in.Artifacts, orig) || in.Truncated.Artifacts[0].Name != secret || in.Truncated.ArtifactsDropped != 1 {
		t.Errorf("MaskResult changed the Result it was handed: %+v", in)
	}
}
