package docexamples

import (
	"strings"
	"testing"
)

const sample = "# Title\n\n" +
	"<!-- not run: installs with apt -->\n" +
	"```sh\napt-get install x\n```\n\n" +
	"Some text.\n\n" +
	"```sh\n" +
	"TOKEN=$(execgate token --tenant demo)\n" +
	"curl -s -i http://127.0.0.1:8010/v1/execute -d '{}'\n" +
	"```\n" +
	"```http\nHTTP/1.1 200 OK\nX-Execution-Status: ok\n\n{\"status\":\"ok\",\"trace_id\":\"8b…\"}\n```\n\n" +
	"- a list item:\n  ```bash\n  echo '{\"a\": \"b\"}'\n  # {\"a\": \"b\"}\n  cat <<'EOF'\n  # {\"not\": \"an expectation\"}\n  EOF\n  ```\n\n" +
	"```console\n$ echo hi \\\n  there\nhi there\n$ true\n```\n\n" +
	"```python\nprint(1)\n```\n"

func TestParseFindsBlocksMarksAndOutputs(t *testing.T) {
	blocks := Parse("x.md", sample)
	if len(blocks) != 6 {
		t.Fatalf("%d blocks, want 6: %+v", len(blocks), blocks)
	}
	if b := blocks[0]; b.NotRun != "installs with apt" || b.Line != 4 || !b.Runnable() {
		t.Errorf("first block: %+v", b)
	}
	if b := blocks[1]; b.NotRun != "" || b.Output == nil || !strings.HasPrefix(b.Output.Code, "HTTP/1.1 200 OK") {
		t.Errorf("second block should run with the http block as its output: %+v", b)
	}
	if b := blocks[3]; b.Lang != "bash" || !strings.HasPrefix(b.Code, "echo ") {
		t.Errorf("an indented block keeps its code without the indentation: %q", b.Code)
	}
	if blocks[5].Runnable() {
		t.Error("a python block is not a shell example")
	}
}

func TestStepsSplitAtShownOutput(t *testing.T) {
	blocks := Parse("x.md", sample)
	steps := blocks[3].Steps()
	if len(steps) != 2 || steps[0].Expect != `{"a": "b"}` || !strings.Contains(steps[1].Script, `# {"not": "an expectation"}`) {
		t.Errorf("bash steps: %+v", steps)
	}
	steps = blocks[4].Steps()
	if len(steps) != 2 || steps[0].Script != "echo hi \\\n  there" || steps[0].Expect != "hi there" || steps[1].Script != "true" {
		t.Errorf("console steps: %+v", steps)
	}
	steps = blocks[1].Steps()
	if len(steps) != 1 || !strings.HasPrefix(steps[0].Expect, "HTTP/1.1 200") {
		t.Errorf("the http block is the last step's expectation: %+v", steps)
	}
}

func TestCheck(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\nX-Execution-Status: ok\r\nContent-Type: application/json\r\n\r\n" +
		`{"status":"ok","result":{"ok":true},"usage":{"wall_ms":35},"trace_id":"abc"}`
	for _, c := range []struct {
		name, expect, got string
		ok                bool
	}{
		{"status, header and scalars match", "HTTP/1.1 200 OK\nX-Execution-Status: ok\n\n{\"status\":\"ok\",\"result\":{\"ok\":true},\"usage\":{\"wall_ms\":1},\"trace_id\":\"8b…\"}", resp, true},
		{"a body right after the head (comment lines) is compared", "HTTP/1.1 200 OK\n{\"status\":\"error\"}", resp, false},
		{"another status fails", "HTTP/1.1 403 Forbidden\n\n{}", resp, false},
		{"another header value fails", "HTTP/1.1 200 OK\nX-Execution-Status: error:Timeout\n\n{}", resp, false},
		{"a shown string the output lacks fails", `{"status":"error"}`, resp, false},
		{"a shown boolean the output lacks fails", `{"ok":false}`, resp, false},
		{"elided values are not compared", `{"execution_id":"probe-…","status":"ok",…}`, resp, true},
		{"a shown list of strings must be the same", `{"reasons":["a","b"]}`, `{"error":{"reasons":["a","b"]}}`, true},
		{"a list of strings that differs fails", `{"reasons":["a"]}`, `{"error":{"reasons":["a","b"]}}`, false},
		{"plain lines must appear", "hello", "say hello\n", true},
		{"missing plain lines fail", "goodbye", "say hello\n", false},
		{"JSON expected but none printed fails", `{"status":"ok"}`, "nothing\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.expect, c.got)
			if (err == nil) != c.ok {
				t.Errorf("Check = %v, want ok=%v", err, c.ok)
			}
		})
	}
}
