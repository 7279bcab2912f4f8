package execution

import (
	"context"
	"errors"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
)

// errNoEnvironments: requirements asked of a gateway without environments.
var errNoEnvironments = &sandbox.UnavailableError{Reason: "requirements need the sandbox's environments (uv and a rootfs), which this gateway has not got"}

// Environment finds the environment a request of tenantID in language for
// runtime names by one of its requirements, requirements_lock and environment_id
// (nil when it names none): Python packages for python (resolved for the
// runtime), npm packages for javascript and typescript (runtime is ""). A
// list that cannot be resolved is a DependencyError (the
// *sandbox.ErrorInfo), not an error; a lock or an environment of the other
// language's is a bad request. A new list with no resolve slot free is an
// *environments.ResolvesBusyError (503 Overloaded).
func (f *Flow) Environment(ctx context.Context, tenantID, language, runtime string, reqs []string, lock, envID string) (*environments.Environment, *sandbox.ErrorInfo, error) {
	if len(reqs) == 0 && lock == "" && envID == "" {
		return nil, nil, nil
	}
	// A new list's resolution takes one of the tenant's resolve slots.
	ctx = environments.WithResolveGate(ctx, f.resolves, tenantID)
	if f.d.Environments == nil {
		return nil, nil, errNoEnvironments
	}
	envs, err := f.d.Environments.For(language, runtime)
	if err != nil {
		return nil, nil, err
	}
	want := environments.EcosystemOf(language)
	mismatch := func(field string, env environments.Environment) error {
		if env.Ecosystem == want {
			return nil
		}
		return BadRequest(field, "holds %s packages; a %s run takes %s packages", ecosystemName(env.Ecosystem), language, ecosystemName(want))
	}
	switch {
	case len(reqs) > 0:
		resolve := envs.Resolve
		if want == environments.EcosystemNPM {
			resolve = envs.ResolveNPM
		}
		env, failure, err := resolve(ctx, reqs)
		if err != nil {
			var busy *environments.ResolvesBusyError
			if IsUnavailable(err) || errors.As(err, &busy) {
				return nil, nil, err
			}
			return nil, nil, BadRequest("requirements", "%v", err)
		}
		if failure != nil {
			return nil, failure, nil
		}
		return &env, nil, nil
	case lock != "":
		env, err := envs.FromLock(lock)
		if err != nil {
			return nil, nil, BadRequest("requirements_lock", "%v", err)
		}
		if err := mismatch("requirements_lock", env); err != nil {
			return nil, nil, err
		}
		return &env, nil, nil
	default:
		env, ok, err := envs.Lookup(envID)
		if err != nil {
			return nil, nil, err
		}
		if !ok && runtime == "" {
			return nil, nil, BadRequest("environment_id", "%s is not an environment this gateway prepared (POST /v1/prepare makes one)", envID)
		}
		if !ok {
			return nil, nil, BadRequest("environment_id", "%s is not an environment this gateway prepared for runtime %s (POST /v1/prepare makes one; ids are per runtime)", envID, runtime)
		}
		if err := mismatch("environment_id", env); err != nil {
			return nil, nil, err
		}
		return &env, nil, nil
	}
}

// ecosystemName names an ecosystem in messages.
func ecosystemName(eco string) string {
	if eco == environments.EcosystemNPM {
		return "npm (JavaScript)"
	}
	return "Python"
}

// NPMPackagePrefix marks an npm package in the policy's input (and in the
// packages data the policy checks it against): "npm:left-pad".
const NPMPackagePrefix = "npm:"

// PolicyPackages is the resolved set as the policy sees it: npm packages
// named with NPMPackagePrefix ("npm:left-pad"), Python ones as they are.
func PolicyPackages(env *environments.Environment) []policy.Package {
	if env == nil {
		return nil
	}
	prefix := ""
	if env.Ecosystem == environments.EcosystemNPM {
		prefix = NPMPackagePrefix
	}
	out := make([]policy.Package, len(env.Packages))
	for i, p := range env.Packages {
		out[i] = policy.Package{Name: prefix + p.Name, Version: p.Version, Index: p.Index, Via: p.Via}
	}
	return out
}

// IsUnavailable says whether err is an *sandbox.UnavailableError: the
// service lacks what the request needs (a runtime it does not serve, one
// without a rootfs), which is a 503 only once the policy has not refused
// the request.
func IsUnavailable(err error) bool {
	var u *sandbox.UnavailableError
	return errors.As(err, &u)
}
