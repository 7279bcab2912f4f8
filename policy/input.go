package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/execgate/execgate/tenancy"
)

// Request is what the policy is asked about: the fields of an execute
// request (DESIGN §4) that the policy sees, before normalisation. Source and
// Args are hashed and measured by BuildInput, never passed on.
type Request struct {
	Language      string
	Entrypoint    string
	Source        string
	Args          []byte // raw JSON of "args", nil when absent
	Requirements  []string
	Packages      []Package // the resolved set; nil when there are no requirements
	NetworkAccess string
	EgressAllow   []string // "egress": {"allow": [...]}
	Limits        Limits   // zero fields: not requested
	Mode          string
	Tools         []string
	Isolation     string // "jail" (default) or "process"
}

// Defaults BuildInput applies to an empty field.
const (
	DefaultLanguage      = "python"
	DefaultEntrypoint    = "run"
	DefaultNetworkAccess = "none"
	DefaultMode          = "run"
	DefaultIsolation     = "jail"
)

// BuildInput builds the versioned policy input for tenant t, principal p and
// request r: it hashes and measures the source (source_sha256, source_bytes)
// and args (args_bytes), applies the defaults (language python, entrypoint
// run, network none, mode run), lower-cases and trims egress hosts, and turns
// nil lists and tenant data into empty ones so the policy always sees the
// same shape. The source itself never enters the input.
func BuildInput(t tenancy.Tenant, p tenancy.Principal, r Request) Input {
	sum := sha256.Sum256([]byte(r.Source))
	data := t.Policy
	if data == nil {
		data = map[string]any{}
	}
	egress := make([]string, 0, len(r.EgressAllow))
	for _, h := range r.EgressAllow {
		egress = append(egress, strings.ToLower(strings.TrimSpace(h)))
	}
	return Input{
		Version: InputVersion,
		Tenant:  TenantInput{ID: t.ID, Plan: t.Plan, Data: data},
		Subject: SubjectInput{Sub: p.Subject, Roles: nonNil(p.Roles)},
		Request: RequestInput{
			Language:      orDefault(r.Language, DefaultLanguage),
			Entrypoint:    orDefault(r.Entrypoint, DefaultEntrypoint),
			SourceSHA256:  hex.EncodeToString(sum[:]),
			SourceBytes:   len(r.Source),
			ArgsBytes:     len(r.Args),
			Requirements:  nonNil(r.Requirements),
			Packages:      nonNilPackages(r.Packages),
			NetworkAccess: orDefault(r.NetworkAccess, DefaultNetworkAccess),
			EgressHosts:   egress,
			Limits:        r.Limits,
			Mode:          orDefault(r.Mode, DefaultMode),
			Tools:         nonNil(r.Tools),
			Isolation:     orDefault(r.Isolation, DefaultIsolation),
		},
	}
}

func orDefault(s, def string) string {
	if s = strings.TrimSpace(s); s == "" {
		return def
	}
	return s
}

func nonNilPackages(ps []Package) []Package {
	out := make([]Package, len(ps))
	for i, p := range ps {
		p.Via = nonNil(p.Via)
		out[i] = p
	}
	return out
}

func nonNil(s []string) []string {
	out := make([]string, len(s))
	copy(out, s)
	return out
}

// requestBody is the subset of the execute request body (DESIGN §4) that
// ParseRequest reads; other fields (execution_id, tenant_id, fixtures, …)
// belong to the gateway and are ignored here.
type requestBody struct {
	Language      string          `json:"language"`
	Entrypoint    string          `json:"entrypoint"`
	Source        string          `json:"source"`
	Args          json.RawMessage `json:"args"`
	Requirements  []string        `json:"requirements"`
	NetworkAccess string          `json:"network_access"`
	Egress        *struct {
		Allow []string `json:"allow"`
	} `json:"egress"`
	Limits *Limits  `json:"limits"`
	Mode   string   `json:"mode"`
	Tools  []string `json:"tools"`

	Isolation string `json:"isolation"`
}

// ParseRequest reads an execute request body (JSON) into a Request, for
// `execgate policy eval` and the admin dry-run. A field of the wrong type is
// an error naming the field. Fields the policy does not see are ignored.
func ParseRequest(body []byte) (Request, error) {
	var b requestBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Request{}, fmt.Errorf("parsing request: field %s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return Request{}, fmt.Errorf("parsing request: %w", err)
	}
	if dec.More() {
		return Request{}, errors.New("parsing request: trailing data after the JSON object")
	}
	r := Request{
		Language:      b.Language,
		Entrypoint:    b.Entrypoint,
		Source:        b.Source,
		Requirements:  b.Requirements,
		NetworkAccess: b.NetworkAccess,
		Mode:          b.Mode,
		Tools:         b.Tools,
		Isolation:     b.Isolation,
	}
	if len(b.Args) > 0 {
		r.Args = []byte(b.Args)
	}
	if b.Egress != nil {
		r.EgressAllow = b.Egress.Allow
	}
	if b.Limits != nil {
		r.Limits = *b.Limits
	}
	return r, nil
}
