# Limits: each requested limit is capped by min(tenant max, platform max) and
# never raised; a limit the request does not set gets the platform default,
# capped the same way. See platform.rego for the numbers.
package execgate.limits

import data.execgate.access

import data.execgate.platform

default requested := {}

requested := input.request.limits

default tenant_max := {}

tenant_max := input.tenant.data.max_limits

# tenant_caps and asked keep the positive numbers of the tenant's maxima and
# of the request; anything else is "not set" (and denied below).
tenant_caps := {k: v | some k, v in tenant_max; is_number(v); v > 0}

asked := {k: v | some k, v in requested; is_number(v); v > 0}

# caps is the most each limit may be, min(platform max, tenant max), and
# capped_defaults what a run gets for a limit it does not request,
# min(platform default, cap). Both depend on the tenant alone (computed once
# per tenant, see policy.tenantOnlyRefs).
caps := {k: min([pmax, object.get(tenant_caps, k, pmax)]) | some k, pmax in platform.limits_max}

capped_defaults := {k: min([platform.limits_default[k], cap]) | some k, cap in caps}

# effective is the decided limits object, every key always:
# min(requested or platform default, platform max, tenant max).
effective := object.union(capped_defaults, {k: min([v, cap]) |
	some k, v in asked
	cap := caps[k]
	platform.limits_default[k]
})

violations contains sprintf("limits.%s must be a non-negative integer", [k]) if {
	some k, r in requested
	r != 0 # 0 means "not requested"
	platform.limits_max[k]
	not valid_request(r)
}

violations contains sprintf("limits.%v is not a known limit", [k]) if some k in unknown

# unknown are the requested keys that name no limit (for an array, every
# index; limit_keys depends on the platform alone).
limit_keys := object.keys(platform.limits_max)

unknown := object.keys(requested) - limit_keys if {
	is_object(requested)
} else := {k | some k, _ in requested}

violations contains reason if some reason in tenant_violations

# tenant_violations depend on input.tenant alone (computed once per tenant).
tenant_violations contains sprintf("tenant %q policy data max_limits.%s must be a positive number", [access.tenant_id, k]) if {
	some k, _ in tenant_max
	platform.limits_max[k]
	not tenant_caps[k]
}

valid_request(r) if {
	is_number(r)
	r >= 0
	r == floor(r)
}
