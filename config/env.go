package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// EnvPrefix starts every override variable.
const EnvPrefix = "EXECGATE_"

// EnvNames lists every EXECGATE_… variable that overrides a config key, with
// its YAML path, sorted. It is the one place to find them all.
func EnvNames() map[string]string {
	out := map[string]string{}
	walkEnv(reflect.TypeOf(Config{}), nil, func(path []string, _ []int) {
		out[envName(path)] = strings.Join(path, ".")
	}, nil)
	return out
}

// SortedEnvNames returns EnvNames as sorted lines "NAME  yaml.path".
func SortedEnvNames() []string {
	m := EnvNames()
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%-44s %s", k, v))
	}
	sort.Strings(lines)
	return lines
}

func envName(path []string) string {
	return EnvPrefix + strings.ToUpper(strings.Join(path, "_"))
}

// walkEnv calls leaf for every settable key: scalars, slices, maps, and
// pointer-to-struct fields (which take JSON).
func walkEnv(t reflect.Type, path []string, leaf func(path []string, index []int), index []int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "-" || tag == "" || !f.IsExported() {
			continue
		}
		p := append(append([]string(nil), path...), tag)
		idx := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct {
			walkEnv(f.Type, p, leaf, idx)
			continue
		}
		leaf(p, idx)
	}
}

func applyEnv(cfg *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	if len(env) == 0 {
		return nil
	}
	root := reflect.ValueOf(cfg).Elem()
	var errs []string
	walkEnv(root.Type(), nil, func(path []string, index []int) {
		name := envName(path)
		val, ok := env[name]
		if !ok {
			return
		}
		if err := setValue(root.FieldByIndex(index), val); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}, nil)
	if len(errs) > 0 {
		return fmt.Errorf("environment overrides: %s", strings.Join(errs, "; "))
	}
	return nil
}

func setValue(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		v.SetInt(n)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String && !strings.HasPrefix(strings.TrimSpace(s), "[") {
			var parts []string
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					parts = append(parts, p)
				}
			}
			v.Set(reflect.ValueOf(parts))
			return nil
		}
		return decodeJSONInto(v, s)
	case reflect.Ptr:
		if v.Type().Elem().Kind() == reflect.Bool {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return fmt.Errorf("not a boolean: %q", s)
			}
			v.Set(reflect.ValueOf(&b))
			return nil
		}
		return decodeJSONInto(v, s)
	case reflect.Map:
		return decodeJSONInto(v, s)
	default:
		return fmt.Errorf("unsupported kind %s", v.Kind())
	}
	return nil
}

func decodeJSONInto(v reflect.Value, s string) error {
	p := reflect.New(v.Type())
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p.Interface()); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	v.Set(p.Elem())
	return nil
}
