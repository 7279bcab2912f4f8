package decode

import (
	"encoding/json"
	"strings"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// ToolServer decodes and checks a PUT /v1/admin/tenants/{id}/tools/servers/{name}
// body for the server name; errors name the field.
func ToolServer(name string, body []byte) (toolconfig.Server, error) {
	cfg := toolconfig.Server{Name: name}
	if err := toolconfig.ValidateAPIName(name); err != nil {
		return cfg, execution.BadRequest("name", "%v", err)
	}
	if err := CheckJSON(body, DefaultMaxDepth); err != nil {
		return cfg, err
	}
	refused := func(why string) func(string, json.RawMessage) error {
		return func(p string, _ json.RawMessage) error { return execution.BadRequest(p, "%s", why) }
	}
	err := decodeObject("", body, fieldFuncs{
		"name": func(p string, r json.RawMessage) error {
			var n string
			if err := decodeString(p, r, &n); err != nil {
				return err
			}
			if n != name {
				return execution.BadRequest(p, "%q differs from the path's %q", n, name)
			}
			return nil
		},
		"url":     func(p string, r json.RawMessage) error { return decodeString(p, r, &cfg.URL) },
		"command": refused("stdio servers are config-only; the API takes a url (the gateway never launches a program for an API caller)"),
		"env":     refused("stdio servers are config-only; the API takes a url"),
		"headers": func(p string, r json.RawMessage) error {
			var hs map[string]json.RawMessage
			if err := json.Unmarshal(r, &hs); err != nil || kindOf(r) != "an object" {
				return execution.BadRequest(p, "must be an object of header name → {file} or {env}, got %s", kindOf(r))
			}
			if len(hs) > toolconfig.MaxHeaders {
				return execution.BadRequest(p, "has %d headers; at most %d", len(hs), toolconfig.MaxHeaders)
			}
			cfg.Headers = make(map[string]toolconfig.Secret, len(hs))
			for h, raw := range hs {
				at := join(p, h)
				if kindOf(raw) != "an object" {
					// Never echo the value: it may be the secret itself.
					return execution.BadRequest(at, "must be {\"file\": path} or {\"env\": variable} naming where the gateway reads the value; a literal value is refused (%s given)", kindOf(raw))
				}
				var sec toolconfig.Secret
				err := decodeObject(at, raw, fieldFuncs{
					"file": func(p string, r json.RawMessage) error { return decodeString(p, r, &sec.File) },
					"env":  func(p string, r json.RawMessage) error { return decodeString(p, r, &sec.Env) },
				})
				if err != nil {
					return err
				}
				cfg.Headers[h] = sec
			}
			return nil
		},
		"allow": func(p string, r json.RawMessage) error { return decodeStrings(p, r, &cfg.Allow) },
		"timeout_ms": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxTimeoutMS, &cfg.TimeoutMS)
		},
		"max_result_bytes": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxResultBytesCap, &cfg.MaxResultBytes)
		},
		"tools_ttl_ms": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxToolsTTLMS, &cfg.ToolsTTLMS)
		},
	})
	if err != nil {
		return cfg, err
	}
	if err := cfg.ValidateAPI(); err != nil {
		return cfg, FieldError(err)
	}
	return cfg, nil
}

// FieldError is a 400 of the first problem of err ("field: why", as
// toolconfig and the Hub word them).
func FieldError(err error) *execution.Error {
	msg := strings.SplitN(err.Error(), "\n", 2)[0]
	field, why, _ := strings.Cut(msg, ": ")
	return execution.BadRequest(field, "%s", why)
}
