package decode

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/execution"
)

// nested returns n arrays nested in each other around inner.
func nested(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

func TestCheckJSONRefusesDeepNestingAndBadUnicodeByPath(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		depth   int
		message string // "" accepts; else the exact message prefix
	}{
		{"a plain request passes", `{"source":"x","args":{"a":[1,-2.5e3,true,false,null,"s"]}}`, 0, ""},
		{"nesting exactly at the maximum passes", `{"args":` + nested(3, "1") + `}`, 4, ""},
		{"one level more is refused at the container that opens it", `{"args":` + nested(4, "1") + `}`, 4, "args[0][0][0]: nests deeper than 4 levels"},
		{"1000 levels of args are refused at level 65", `{"source":"x","args":` + nested(1000, "") + `}`, 64, "args" + strings.Repeat("[0]", 63) + ": nests deeper than 64 levels"},
		{"1000 levels of objects in fixtures name each key", `{"fixtures":{"variables":` + strings.Repeat(`{"a":`, 1000) + `1` + strings.Repeat(`}`, 1000) + `}}`, 0, "fixtures.variables" + strings.Repeat(".a", 62) + ": nests deeper than 64"},
		{"the path counts array indexes", `{"args":{"a":{"b":[0,1,2,[[[1]]]]}}}`, 6, "args.a.b[3][0][0]: nests deeper than 6"},
		{"invalid UTF-8 in a string", "{\"args\":{\"a\":[\"ok\",\"x\xffy\"]}}", 0, "args.a[1]: holds invalid UTF-8"},
		{"invalid UTF-8 in the source", "{\"source\":\"def run(a, c):\xc0\xaf\"}", 0, "source: holds invalid UTF-8"},
		{"an encoded surrogate (CESU) is invalid UTF-8", "{\"args\":\"\xed\xa0\x80\"}", 0, "args: holds invalid UTF-8"},
		{"invalid UTF-8 in a key", "{\"args\":{\"k\xfe\":1}}", 0, "args: a key holds invalid UTF-8"},
		{"a lone low surrogate escape", `{"args":{"a":"\udc80"}}`, 0, `args.a: holds an unpaired UTF-16 surrogate escape \udc80`},
		{"a lone high surrogate escape at the end", `{"fixtures":{"variables":{"v":"x\uD800"}}}`, 0, `fixtures.variables.v: holds an unpaired UTF-16 surrogate escape \uD800`},
		{"a high surrogate followed by no low one", `{"args":["\ud800\u0041"]}`, 0, `args[0]: holds an unpaired UTF-16 surrogate escape \ud800`},
		{"a lone surrogate in a key", `{"args":{"\udfff":1}}`, 0, `args: a key holds an unpaired`},
		{"a surrogate pair passes", `{"args":"\ud83d\ude00"}`, 0, ""},
		{"U+FFFD itself passes", "{\"args\":\"\xef\xbf\xbd \\ufffd\"}", 0, ""},
		{"odd keys are quoted in the path", `{"args":{"a b":{"\"":"\udc80"}}}`, 0, `args["a b"]["\""]: holds`},
		{"a control character is a syntax error", "{\"args\":\"a\x01\"}", 0, "body: is not valid JSON"},
		{"trailing data is a syntax error", `{"source":"x"} {}`, 0, "body: is not valid JSON"},
		{"a bad number is a syntax error", `{"args":01}`, 0, "body: is not valid JSON"},
		{"an unclosed object is a syntax error", `{"args":[1,2]`, 0, "body: is not valid JSON"},
		{"a missing colon is a syntax error", `{"args" 1}`, 0, "body: is not valid JSON"},
		{"an empty body", ` `, 0, "body: is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJSON([]byte(tt.body), tt.depth)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ae *execution.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want a 400", err)
			}
			if ae.Status != http.StatusBadRequest || ae.Type != execution.TypeBadRequest || !strings.HasPrefix(ae.Message, tt.message) {
				t.Fatalf("got %d %s %q, want 400 BadRequest %q…", ae.Status, ae.Type, ae.Message, tt.message)
			}
		})
	}
}

// Every body route applies the check: execute, validate and the admin
// dry run (whose paths start at the whole body: request.args…).
func TestEveryBodyDecoderChecksTheJSON(t *testing.T) {
	deep := nested(100, "")
	c := Caps{Body: 1 << 20, Source: 100, Args: 1 << 16}
	if _, err := Execute([]byte(`{"source":"x","args":`+deep+`}`), c); err == nil || !strings.HasPrefix(err.(*execution.Error).Message, "args[0]") {
		t.Errorf("execute: %v", err)
	}
	if _, err := Validate([]byte("{\"source\":\"\xff\"}"), c); err == nil || !strings.HasPrefix(err.(*execution.Error).Message, "source: holds invalid UTF-8") {
		t.Errorf("validate: %v", err)
	}
	_, _, _, err := Evaluate([]byte(`{"tenant_id":"demo","request":{"source":"x","args":`+deep+`}}`), c)
	if err == nil || !strings.HasPrefix(err.(*execution.Error).Message, "request.args[0]") {
		t.Errorf("evaluate: %v", err)
	}
	if _, err := Quota([]byte(`{"burst":` + deep + `}`)); err == nil || !strings.Contains(err.(*execution.Error).Message, "nests deeper") {
		t.Errorf("quota: %v", err)
	}
}
