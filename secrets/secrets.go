// Package secrets is brokered secrets (issue #24): credentials a tenant's
// tools may use but its callers may not see. A tenant names them in its
// config (tenants[].secrets: NAME → a reference to a file or variable of
// the gateway, never a value, under the same rules as tool servers'
// headers); its policy grants names per run (decision.secrets); the flow
// reads the granted ones at each use (Resolve: a rotated file is picked
// up), the sandbox hands them to the run's harness over the request pipe
// (context.secrets and files under /run/execgate/secrets/ in the jail), and
// a Masker replaces every value, and the forms it is commonly written in,
// with Mask in whatever the run sends back: its output (live, too), result,
// logs, error and egress attempts.
//
// A Value never prints, logs or encodes its value: only Reveal gives it,
// and only the sandbox's request encoding and the split mode's sealed
// delivery (package dispatch) call it.
package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"unicode/utf8"

	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Config is a tenant's secrets (tenants[].secrets in the config file):
// NAME → {file: PATH} or {env: VAR}, read with toolconfig.Secret.Read.
type Config map[string]toolconfig.Secret

// Bounds on secrets.
const (
	// MaxPerTenant bounds the names of one tenant's Config.
	MaxPerTenant = 64
	// MaxPerRun bounds the secrets one run asks for (and gets).
	MaxPerRun = 16
	// MaxValueBytes bounds one value as read: an API token, a password or
	// a PEM private key (RSA 4096: about 3.2 KiB) fits.
	MaxValueBytes = 4096
	// MinMaskBytes is the shortest value the Masker masks: a shorter
	// value would mask innocent text everywhere ("1", "ab", "true") and
	// make every output useless, while protecting nothing (a value that
	// short is guessed, not leaked). Such a value is delivered, not
	// masked; the flow logs that (by name).
	MinMaskBytes = 4
	// minFormBytes is the shortest derived form (base64 fragments) that
	// is masked: shorter fragments would match unrelated base64 text.
	minFormBytes = 6
)

// Mask replaces a secret in what a run sends back.
const Mask = "***"

// nameRE: a name is an identifier, so context.secrets.NAME works in
// JavaScript and it is a file name under /run/execgate/secrets.
var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidName reports whether name may name a secret: 1 to 64 letters,
// digits and '_', not starting with a digit.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// NameRule says what ValidName accepts, for error messages.
const NameRule = "1 to 64 letters, digits or '_', not starting with a digit"

// Validate checks c as tenants[].secrets: names, references (exactly one
// of file and env, within the bounds of a tool server's header) and scope:
// a file must lie below one of tools_api.secret_dirs and a variable start
// with one of tools_api.env_prefixes, as for tool servers added over the
// admin API. The values reach tenants' tool code, so a reference may not
// point at what the gateway holds for itself (its signing key, the Redis
// password). scope has its defaults applied. Errors name the key below
// secrets.
func (c Config) Validate(scope toolconfig.APIScope) error {
	var errs []error
	if len(c) > MaxPerTenant {
		errs = append(errs, fmt.Errorf("secrets: %d secrets; at most %d", len(c), MaxPerTenant))
	}
	for _, name := range c.Names() {
		ref := c[name]
		if !ValidName(name) {
			errs = append(errs, fmt.Errorf("secrets: %q is not a secret name (%s)", name, NameRule))
			continue
		}
		if (ref.File == "") == (ref.Env == "") {
			errs = append(errs, fmt.Errorf("secrets.%s: set exactly one of file or env", name))
			continue
		}
		for _, err := range []error{ref.ValidateRef(), scope.CheckRef(ref)} {
			if err != nil {
				errs = append(errs, fmt.Errorf("secrets.%s.%w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Names are c's names, sorted.
func (c Config) Names() []string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Value is one secret as read for a run: its name and value. Its value
// never appears where a Value is printed (String, GoString, slog) or
// encoded (MarshalJSON fails): only Reveal gives it.
type Value struct {
	name  string
	value string
}

// NewValue is a Value (for fixtures and tests; Resolve reads real ones).
func NewValue(name, value string) Value { return Value{name: name, value: value} }

// Name is the secret's name.
func (v Value) Name() string { return v.name }

// Reveal is the secret's value. Call it only where the value goes to the
// run: the harness request, the sealed delivery to an executor.
func (v Value) Reveal() string { return v.value }

// String never shows the value.
func (v Value) String() string { return v.name + "=" + Mask }

// GoString never shows the value (%#v).
func (v Value) GoString() string { return "secrets.Value{" + v.name + "}" }

// LogValue never shows the value.
func (v Value) LogValue() slog.Value { return slog.StringValue(v.String()) }

// errNeverEncoded: a Value is never encoded as JSON.
var errNeverEncoded = errors.New("a secret value is never encoded")

// MarshalJSON refuses: a Value is never encoded, so a struct that carries
// one by mistake fails loudly instead of leaking it.
func (v Value) MarshalJSON() ([]byte, error) { return nil, errNeverEncoded }

var _ json.Marshaler = Value{}

// Names are the names of vals, in order.
func Names(vals []Value) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v.name
	}
	return out
}

// UnavailableError says why a secret granted to a run could not be read.
// Its message names the secret and the cause (a file path, a variable's
// name: for the operator's log), never the value; Public is what the
// caller may see.
type UnavailableError struct {
	Name string
	Err  error
}

func (e *UnavailableError) Error() string { return fmt.Sprintf("secret %s: %v", e.Name, e.Err) }

func (e *UnavailableError) Unwrap() error { return e.Err }

// Public is the caller's message: which secret, not where it lives.
func (e *UnavailableError) Public() string {
	return fmt.Sprintf("the secret %q granted to this run cannot be read (the gateway's log says why); nothing was run", e.Name)
}

// errNotConfigured: a granted name the tenant's config does not have.
var errNotConfigured = errors.New("granted by policy but not configured for the tenant (tenants[].secrets)")

// Resolve reads the secrets names of c, in order, at this moment (a
// rotated file is read anew). Any name that cannot be read — not
// configured, file missing or unreadable, variable unset, empty, over
// MaxValueBytes, not text — is an *UnavailableError naming it: a run
// never gets an empty or partial secret.
func Resolve(c Config, names []string, getenv func(string) string) ([]Value, error) {
	out := make([]Value, 0, len(names))
	for _, name := range names {
		ref, ok := c[name]
		if !ok {
			return nil, &UnavailableError{Name: name, Err: errNotConfigured}
		}
		v, err := ref.Read(getenv, MaxValueBytes)
		if err == nil {
			err = CheckText(v)
		}
		if err != nil {
			return nil, &UnavailableError{Name: name, Err: err}
		}
		out = append(out, Value{name: name, value: v})
	}
	return out, nil
}

// CheckText refuses a value that is not text: invalid UTF-8, or control
// characters other than tab and line breaks. Tools get a secret as a
// string (context.secrets), and its masked forms stay bounded.
func CheckText(v string) error {
	if !utf8.ValidString(v) {
		return errors.New("the value is not UTF-8 text")
	}
	for _, r := range v {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f {
			return fmt.Errorf("the value holds the control character %U (only tab and line breaks are allowed)", r)
		}
	}
	return nil
}
