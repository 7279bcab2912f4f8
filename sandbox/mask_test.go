package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/execgate/execgate/secrets"
)

// maskExempt are the string fields of a Result a tool cannot put text in:
// decided by the runner, the kernel or the gateway, from closed sets.
var maskExempt = map[string]bool{
	"Result.Status": true, "Result.NsjailLog": true, "Result.DeniedSyscall": true,
	"ErrorInfo.Type": true, "Usage.Isolation": true, "EgressAttempt.IP": true,
	"ToolCall.DecisionID": true, "ToolCall.ArgsSHA256": true,
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
