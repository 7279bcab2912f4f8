// Package docexamples finds the shell examples of the documentation
// (README.md and docs/) and says what each should print; its test runs
// every one against a real `execgate serve`, so a documented command that
// fails fails the build.
//
// A runnable block is a fenced block of language sh, bash, shell or
// console. Its expected output, where the document shows one, is:
//   - in sh/bash, a comment line starting `# {`, `# [` or `# HTTP/` right
//     after a command: what that command prints;
//   - in console, the lines after a `$ ` command that are not commands;
//   - a fenced `http` block right after the runnable block: what its last
//     command prints (curl -i: status line, headers, body).
//
// A block that cannot run in a test (an apt install, the test script
// itself, a deploy to a cluster, a package index on the network) is marked
// with an HTML comment right before it: <!-- not run: why -->. The test
// lists those; every other block must exit 0 and print what it shows.
//
// How to add an example: write it as a reader would type it, against
// $EXECGATE_URL (or http://127.0.0.1:8010, which the test rewrites) with
// $TOKEN / $EXECGATE_TOKEN (an executor token of tenant demo) or $ADMIN (an
// admin token); show its output as a `# {…}` comment or an http block.
// Values the run decides (ids, timings) are elided with "…" and not compared.
package docexamples

import (
	"bufio"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	File string
	Line int // 1-based line of the opening fence
	Lang string
	Code string
	// NotRun is the reason given by a <!-- not run: … --> comment before
	// the block ("" when it runs).
	NotRun string
	// Output is the http block that follows it, if any.
	Output *Block

	endLine int // index of the closing fence
}

// Runnable reports whether the block is a shell example.
func (b Block) Runnable() bool {
	switch b.Lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

var (
	fenceRE  = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	notRunRE = regexp.MustCompile(`^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$`)
)

// Parse returns the fenced blocks of a Markdown document in order, with
// the not-run reasons and following http blocks attached.
func Parse(file, md string) []Block {
	var blocks []Block
	lines := strings.Split(md, "\n")
	lastNonBlank := -1 // index of the last non-blank line outside a block
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.TrimSpace(lines[i]) != "" {
				lastNonBlank = i
			}
			continue
		}
		indent, fence, lang := m[1], m[2], m[3]
		b := Block{File: file, Line: i + 1, Lang: lang}
		if lastNonBlank >= 0 {
			if nr := notRunRE.FindStringSubmatch(lines[lastNonBlank]); nr != nil {
				b.NotRun = nr[1]
				if b.NotRun == "" {
					b.NotRun = "(no reason given)"
				}
			}
		}
		var code []string
		j := i + 1
		for ; j < len(lines); j++ {
			t := strings.TrimLeft(lines[j], " \t")
			if strings.HasPrefix(t, fence[:3]) && strings.Trim(t, fence[:1]+" \t") == "" && len(strings.TrimSpace(t)) >= len(fence) {
				break
			}
			code = append(code, strings.TrimPrefix(lines[j], indent))
		}
		b.Code = strings.Join(code, "\n")
		// An http block right after a runnable block is its output.
		if n := len(blocks); b.Lang == "http" && n > 0 && blocks[n-1].Runnable() && blank(lines[blocks[n-1].endLine+1:i]) {
			out := b
			blocks[n-1].Output = &out
		}
		b.endLine = j
		blocks = append(blocks, b)
		i = j
		lastNonBlank = -1
	}
	return blocks
}

func blank(lines []string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return false
		}
	}
	return true
}

// Step is a piece of a block's script and what its output must show.
type Step struct {
	Script string
	// Expect is the expected output shown after the step's commands ("" when none).
	Expect string
}

// Steps splits a runnable block into scripts at its expected outputs, so
// each expectation is compared with the output of the commands before it.
func (b Block) Steps() []Step {
	var steps []Step
	var script, expect []string
	flush := func() {
		steps = append(steps, Step{Script: strings.Join(script, "\n"), Expect: strings.Join(expect, "\n")})
		script, expect = nil, nil
	}
	sc := bufio.NewScanner(strings.NewReader(b.Code))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inCommand := false // console: a command continued with a trailing backslash
	heredoc := ""      // the delimiter of a heredoc being read
	for sc.Scan() {
		line := sc.Text()
		if heredoc != "" {
			script = append(script, line)
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
			continue
		}
		var cmd string
		isCmd := true
		if b.Lang == "console" {
			switch {
			case inCommand:
				cmd = line
			case strings.HasPrefix(line, "$ "):
				cmd = line[2:]
			default:
				isCmd = false
			}
			inCommand = isCmd && strings.HasSuffix(line, "\\")
		} else {
			cmd = line
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "# {") || strings.HasPrefix(t, "# [") || strings.HasPrefix(t, "# HTTP/") {
				isCmd = false
				line = strings.TrimPrefix(t, "# ")
			}
		}
		if !isCmd {
			expect = append(expect, line)
			continue
		}
		if len(expect) > 0 {
			flush()
		}
		script = append(script, cmd)
		if m := heredocRE.FindStringSubmatch(cmd); m != nil {
			heredoc = m[1]
		}
	}
	if b.Output != nil {
		expect = append(expect, b.Output.Code)
	}
	if len(script) > 0 || len(expect) > 0 {
		flush()
	}
	return steps
}

var heredocRE = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

// ellipsis marks a value the example does not fix (an id, a timing).
const ellipsis = "…"

// Check compares a command's output with the output the document shows.
// The expectation is an HTTP response (status line, headers, body), JSON,
// or plain lines. Compared are: the status code, each header whose value
// has no "…", and every string, boolean, null and list of strings of the
// JSON the document shows whose value has no "…" (numbers are measurements or limits and are
// not compared; a "…" stands for what the document leaves out). Plain lines
// without "…" must appear in the output.
func Check(expect, got string) error {
	expect = strings.TrimSpace(expect)
	if expect == "" {
		return nil
	}
	if strings.HasPrefix(expect, "HTTP/") {
		head, body, ok := strings.Cut(strings.ReplaceAll(expect, "\r\n", "\n"), "\n\n")
		if !ok { // comment lines: the body starts at the first JSON line
			if i := strings.Index(head, "\n{"); i >= 0 {
				head, body = head[:i], head[i+1:]
			}
		}
		ghead, gbody, ok := cutHTTP(got)
		if !ok {
			return fmt.Errorf("expected an HTTP response, got %q", clip(got))
		}
		if err := checkHead(head, ghead); err != nil {
			return err
		}
		return checkBody(body, gbody)
	}
	return checkBody(expect, got)
}

// cutHTTP finds the last HTTP response head in s (curl -i, after any
// interim 100 Continue) and the body after it.
func cutHTTP(s string) (head, body string, ok bool) {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	i := strings.LastIndex(s, "HTTP/1.1 ")
	if j := strings.LastIndex(s, "HTTP/2 "); j > i {
		i = j
	}
	if i < 0 {
		return "", "", false
	}
	head, body, _ = strings.Cut(s[i:], "\n\n")
	return head, body, true
}

func checkHead(want, got string) error {
	wl := strings.Split(want, "\n")
	gl := strings.Split(got, "\n")
	wcode, gcode := statusCode(wl[0]), statusCode(gl[0])
	if wcode != gcode {
		return fmt.Errorf("status %d, want %d (%s)", gcode, wcode, gl[0])
	}
	headers := map[string]string{}
	for _, l := range gl[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok {
			headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	for _, l := range wl[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.Contains(v, ellipsis) {
			continue
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if g, ok := headers[k]; !ok || g != v {
			return fmt.Errorf("header %s: %q, want %q", k, g, v)
		}
	}
	return nil
}

func statusCode(line string) int {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// checkBody compares the scalars the document shows with the output's JSON
// (the last JSON document in it), or, for plain text, the lines.
func checkBody(want, got string) error {
	want = strings.TrimSpace(want)
	if want == "" {
		return nil
	}
	if !strings.HasPrefix(want, "{") && !strings.HasPrefix(want, "[") {
		for _, l := range strings.Split(want, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, ellipsis) && !strings.Contains(got, l) {
				return fmt.Errorf("the output lacks %q:\n%s", l, clip(got))
			}
		}
		return nil
	}
	pairs := shownPairs(want)
	if len(pairs) == 0 {
		return nil
	}
	have := map[string]bool{}
	for _, doc := range jsonDocs(got) {
		collect(doc, have)
	}
	if len(have) == 0 {
		return fmt.Errorf("expected JSON output, got %q", clip(got))
	}
	for _, p := range pairs {
		if !have[p] {
			return fmt.Errorf("the output has no %s:\n%s", p, clip(got))
		}
	}
	return nil
}

// pairRE finds "key": value pairs whose value is a string, true, false,
// null or a list of strings in the text the document shows (which, elided with "…", is rarely
// valid JSON).
var pairRE = regexp.MustCompile(`"([^"\\]+)"\s*:\s*("(?:[^"\\]|\\.)*"|true|false|null|\[\s*(?:"(?:[^"\\]|\\.)*"\s*,?\s*)*\])`)

func shownPairs(text string) []string {
	var out []string
	for _, m := range pairRE.FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[2], ellipsis) || m[1] == "..." {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(m[2]), &v); err != nil {
			continue
		}
		out = append(out, pairKey(m[1], v))
	}
	return out
}

func pairKey(k string, v any) string {
	b, _ := json.Marshal(v)
	return fmt.Sprintf("%q: %s", k, b)
}

// jsonDocs decodes every JSON value in s (a command may print several).
func jsonDocs(s string) []any {
	var out []any
	for i := 0; i < len(s); i++ {
		if s[i] != '{' && s[i] != '[' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		var v any
		if err := dec.Decode(&v); err != nil {
			continue
		}
		out = append(out, v)
		i += int(dec.InputOffset()) - 1
	}
	return out
}

// collect adds every key: scalar pair at any depth of v to have.
func collect(v any, have map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch e := e.(type) {
			case map[string]any:
				collect(e, have)
			case []any:
				if scalars(e) {
					have[pairKey(k, e)] = true
				}
				collect(e, have)
			default:
				have[pairKey(k, e)] = true
			}
		}
	case []any:
		for _, e := range x {
			collect(e, have)
		}
	}
}

func scalars(list []any) bool {
	for _, e := range list {
		switch e.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}
