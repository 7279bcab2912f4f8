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

// Environment finds the environment a request for runtime names by one of
// its requirements, requirements_lock and environment_id (nil when it
// names none). A list that cannot be resolved is a DependencyError (the
// *sandbox.ErrorInfo), not an error.
func (f *Flow) Environment(ctx context.Context, runtime string, reqs []string, lock, envID string) (*environments.Environment, *sandbox.ErrorInfo, error) {
	if len(reqs) == 0 && lock == "" && envID == "" {
		return nil, nil, nil
	}
	if f.d.Environments == nil {
		return nil, nil, errNoEnvironments
	}
	envs, err := f.d.Environments.For(runtime)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case len(reqs) > 0:
		env, failure, err := envs.Resolve(ctx, reqs)
		if err != nil {
			if IsUnavailable(err) {
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
		return &env, nil, nil
	default:
		env, ok, err := envs.Lookup(envID)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, BadRequest("environment_id", "%s is not an environment this gateway prepared for runtime %s (POST /v1/prepare makes one; ids are per runtime)", envID, runtime)
		}
		return &env, nil, nil
	}
}

// PolicyPackages is the resolved set as the policy sees it.
func PolicyPackages(env *environments.Environment) []policy.Package {
	if env == nil {
		return nil
	}
	out := make([]policy.Package, len(env.Packages))
	for i, p := range env.Packages {
		out[i] = policy.Package{Name: p.Name, Version: p.Version, Index: p.Index, Via: p.Via}
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
