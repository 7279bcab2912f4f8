package docgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/execgate/execgate/config"
)

// Key is one key of the config file.
type Key struct {
	// Path is the YAML path: server.max_body_bytes, tenants[].tools.servers[].name.
	Path string
	// Section is the top-level key the path starts with ("" for scalars at
	// the top level).
	Section string
	// Type is the YAML type: string, integer, boolean, list of strings,
	// map, object, list of objects.
	Type string
	// Unit comes from the key's suffix (_ms, _seconds, _mb, _bytes,
	// _per_minute); "" when it names none.
	Unit string
	// Doc is the Go field's doc comment, Go field names replaced by their
	// YAML keys.
	Doc string
	// Default is the default the doc comment states ("" when it states none).
	Default string
	// Env is the environment variable that sets the key ("" for keys inside
	// lists and maps, which are set through their list's variable).
	Env string
	// Container is true for keys holding other keys (objects, lists of
	// objects, maps of objects).
	Container bool
	// Field names the Go field: package path, type and field.
	Field string
}

// ConfigKeys walks config.Config by reflection and reads every field's doc
// comment from the source below root. Every field is returned, documented
// or not (the test fails for an undocumented one).
func ConfigKeys(root string) ([]Key, error) {
	docs, err := newDocIndex(root)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for name, path := range config.EnvNames() {
		env[path] = name
	}
	var keys []Key
	var walk func(t reflect.Type, prefix, section string) error
	walk = func(t reflect.Type, prefix, section string) error {
		sd, err := docs.structDocs(t)
		if err != nil {
			return err
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			path := prefix + name
			sec := section
			if sec == "" && prefix == "" && isContainer(f.Type) {
				sec = name
			}
			doc := trimSubject(sd.rename(sd.fields[f.Name]), name)
			k := Key{
				Path: path, Section: sec, Type: typeName(f.Type), Unit: unitOf(name),
				Doc: doc, Default: defaultOf(doc), Env: env[path],
				Container: isContainer(f.Type),
				Field:     fmt.Sprintf("%s.%s.%s", t.PkgPath(), t.Name(), f.Name),
			}
			keys = append(keys, k)
			if elem, suffix := containerElem(f.Type); elem != nil {
				if err := walk(elem, path+suffix+".", sec); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(reflect.TypeOf(config.Config{}), "", ""); err != nil {
		return nil, err
	}
	return keys, nil
}

// containerElem is the struct a container field holds and the path suffix
// its keys get ("" for an object, "[]" for a list, ".<name>" for a map).
func containerElem(t reflect.Type) (reflect.Type, string) {
	switch t.Kind() {
	case reflect.Struct:
		return t, ""
	case reflect.Pointer, reflect.Slice, reflect.Map:
		e := t.Elem()
		if e.Kind() != reflect.Struct {
			return nil, ""
		}
		switch t.Kind() {
		case reflect.Slice:
			return e, "[]"
		case reflect.Map:
			return e, ".<name>"
		}
		return e, ""
	}
	return nil, ""
}

func isContainer(t reflect.Type) bool {
	e, _ := containerElem(t)
	return e != nil
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Struct:
		return "object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "list of objects"
		}
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		if t.Elem().Kind() == reflect.Struct {
			return "map of objects"
		}
		return "map"
	}
	return t.Kind().String()
}

// units maps a key's suffix to its unit.
var units = []struct{ suffix, unit string }{
	{"_ms", "milliseconds"},
	{"_seconds", "seconds"},
	{"_mb", "MiB"},
	{"_bytes", "bytes"},
	{"_per_minute", "per minute"},
}

func unitOf(name string) string {
	for _, u := range units {
		if strings.HasSuffix(name, u.suffix) {
			return u.unit
		}
	}
	return ""
}

// defaultRE finds the clause of a doc comment that states a default: a
// sentence or clause starting "Default …" / "Defaults: …" / "Empty: …" /
// "Zero: …" / "Absent: …" / "Zero means the default, …", a "(default …)",
// or a quoted value marked `"memory" (default)`.
var (
	defaultClauseRE = regexp.MustCompile(`^(?:Defaults?(?: \([^)]*\))?:?|Empty:|Zero:|Absent:|Zero means the default,|None:) (.+)$`)
	defaultParenRE  = regexp.MustCompile(`\(default ([^)]+)\)`)
	defaultQuoteRE  = regexp.MustCompile(`"([^"]+)" \(default(?:: [^)]*)?\)`)
	zeroClauseRE    = regexp.MustCompile(`^0: (.+)$`)
)

// defaultOf is the default a doc comment states, "" when none.
func defaultOf(doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if m := defaultQuoteRE.FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	for _, c := range clauses(doc) {
		if m := defaultClauseRE.FindStringSubmatch(c); m != nil {
			return m[1]
		}
		if m := zeroClauseRE.FindStringSubmatch(c); m != nil {
			return "0 = " + m[1]
		}
	}
	if m := defaultParenRE.FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	return ""
}

// clauses splits text into sentences and ;-clauses, without their ending
// punctuation.
func clauses(text string) []string {
	text = strings.Join(strings.Fields(text), " ")
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		end := text[i] == ';' || (text[i] == '.' && (i+1 == len(text) || text[i+1] == ' '))
		if !end || strings.HasSuffix(text[:i+1], "e.g.") || strings.HasSuffix(text[:i+1], "i.e.") {
			continue
		}
		if c := strings.TrimSpace(text[start:i]); c != "" {
			out = append(out, c)
		}
		start = i + 1
	}
	if c := strings.TrimSpace(strings.TrimSuffix(text[start:], ".")); c != "" {
		out = append(out, c)
	}
	return out
}

// docIndex reads the doc comments of struct types and their fields from
// the module's source.
type docIndex struct {
	root, module string
	pkgs         map[string]map[string]*structDoc // package path → type name → docs
}

type structDoc struct {
	doc    string
	fields map[string]string // Go field name → doc comment
	yaml   map[string]string // Go field name → YAML key
}

func newDocIndex(root string) (*docIndex, error) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var module string
	for _, line := range strings.Split(string(mod), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			module = strings.TrimSpace(m)
		}
	}
	if module == "" {
		return nil, fmt.Errorf("no module line in %s/go.mod", root)
	}
	return &docIndex{root: root, module: module, pkgs: map[string]map[string]*structDoc{}}, nil
}

// structDocs returns the docs of struct type t (a type of this module).
func (x *docIndex) structDocs(t reflect.Type) (*structDoc, error) {
	types, ok := x.pkgs[t.PkgPath()]
	if !ok {
		var err error
		if types, err = x.parse(t.PkgPath()); err != nil {
			return nil, err
		}
		x.pkgs[t.PkgPath()] = types
	}
	sd, ok := types[t.Name()]
	if !ok {
		return nil, fmt.Errorf("struct %s.%s not found in the source", t.PkgPath(), t.Name())
	}
	if sd.yaml == nil {
		sd.yaml = map[string]string{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if name := strings.Split(f.Tag.Get("yaml"), ",")[0]; name != "" && name != "-" {
				sd.yaml[f.Name] = name
			}
		}
	}
	return sd, nil
}

func (x *docIndex) parse(pkgPath string) (map[string]*structDoc, error) {
	rel, ok := strings.CutPrefix(pkgPath, x.module)
	if !ok {
		return nil, fmt.Errorf("package %s is not in module %s", pkgPath, x.module)
	}
	dir := filepath.Join(x.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	out := map[string]*structDoc{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				sd := &structDoc{doc: ts.Doc.Text(), fields: map[string]string{}}
				if sd.doc == "" {
					sd.doc = gd.Doc.Text()
				}
				for _, field := range st.Fields.List {
					for _, n := range field.Names {
						sd.fields[n.Name] = strings.TrimSpace(field.Doc.Text())
					}
				}
				out[ts.Name.Name] = sd
			}
		}
	}
	return out, nil
}

// goNameRE matches Go-style identifiers that may name a field.
var goNameRE = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// rename replaces the struct's Go field names in doc by their YAML keys.
func (sd *structDoc) rename(doc string) string {
	return goNameRE.ReplaceAllStringFunc(doc, func(w string) string {
		if y, ok := sd.yaml[w]; ok {
			return "`" + y + "`"
		}
		return w
	})
}

// trimSubject drops the key's own name that starts a Go doc comment
// ("`max_body_bytes` caps the body" → "Caps the body"; "`x` is the y" →
// "The y"; "`x`: the z" → "The z"), which the table already shows.
func trimSubject(doc, name string) string {
	rest, ok := strings.CutPrefix(doc, "`"+name+"`")
	if !ok {
		return doc
	}
	rest = strings.TrimPrefix(rest, ":")
	rest = strings.TrimPrefix(rest, " is ")
	rest = strings.TrimPrefix(rest, " are ")
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return doc
	}
	return strings.ToUpper(rest[:1]) + rest[1:]
}

// ConfigReference renders docs/reference/configuration.md.
func ConfigReference(root string) (string, error) {
	keys, err := ConfigKeys(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, generatedNote, "the config structs (config.Config and the Config of each package it composes)")
	b.WriteString(`# Configuration reference

One strict YAML file (` + "`execgate serve --config FILE`" + `; unknown keys are errors, and
so is a misspelled one). Without a file execgate runs the **embedded default**: one
tenant ` + "`demo`" + `, in-memory quotas, the default policies. Every key below can also be
set by an environment variable named after its path: upper-cased, joined with
underscores, prefixed ` + "`EXECGATE_`" + ` (` + "`quota.redis_url`" + ` →
` + "`EXECGATE_QUOTA_REDIS_URL`" + `). Lists take comma-separated values or a JSON array;
objects and lists of objects (` + "`EXECGATE_TENANTS`" + `) take JSON. ` + "`execgate config env`" + `
lists every variable and ` + "`execgate config print`" + ` shows the effective configuration with
secrets redacted. ` + "`--listen`" + ` and ` + "`--state-dir`" + ` work on every command.

A complete, commented example is ` + "`deploy/examples/config.yaml`" + ` in the repository.
Zero or absent means the default unless a key says otherwise. The page is generated
from the Go structs the config is decoded into and their doc comments, so it lists
every key there is.

`)
	// Sections in struct order: the top-level scalars first.
	var order []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k.Section] {
			seen[k.Section] = true
			order = append(order, k.Section)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] == "" && order[j] != "" })
	for _, sec := range order {
		if sec == "" {
			b.WriteString("## Top level {#top-level}\n\n")
		} else {
			fmt.Fprintf(&b, "## `%s` {#%s}\n\n", sec, sec)
			if strings.HasSuffix(keys[indexOf(keys, sec)].Type, "list of objects") {
				fmt.Fprintf(&b, "A list; each entry has the keys below (`%s[].…`).\n\n", sec)
			}
		}
		for _, k := range keys {
			if k.Path == sec {
				fmt.Fprintf(&b, "%s\n\n", prose(k.Doc))
			}
		}
		b.WriteString("| key | type | default | description |\n|---|---|---|---|\n")
		for _, k := range keys {
			if k.Section != sec || k.Path == sec {
				continue
			}
			// The key relative to its section (the heading names it); the
			// row's id is the whole path.
			rel := strings.TrimPrefix(strings.TrimPrefix(k.Path, sec), "[]")
			rel = strings.TrimPrefix(rel, ".")
			key := "`" + rel + "`"
			doc := cell(k.Doc)
			if k.Env != "" {
				doc += " Env `" + k.Env + "`."
			}
			typ := k.Type
			if k.Unit != "" {
				typ += " (" + k.Unit + ")"
			}
			def := k.Default
			if def == "" {
				def = "—"
			}
			fmt.Fprintf(&b, "| <span id=\"%s\"></span>%s | %s | %s | %s |\n", anchorID(k.Path), key, typ, cell(def), doc)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

func indexOf(keys []Key, path string) int {
	for i, k := range keys {
		if k.Path == path {
			return i
		}
	}
	return 0
}

// anchorID is the HTML id of a key's row: its path with [] and <> removed
// (tenants[].tools.servers[].name → tenants.tools.servers.name).
func anchorID(path string) string {
	return strings.NewReplacer("[]", "", ".<name>", "").Replace(path)
}
