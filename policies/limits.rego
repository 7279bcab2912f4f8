# Limits: each requested limit is capped by min(tenant max, platform max) and
# never raised; a limit the request does not set gets the platform default,
# capped the same way. See platform.rego for the numbers.
package execgate.limits

import data.execgate.access

import data.execgate.platform

default tenant_max := {}

tenant_max := input.tenant.data.max_limits

# tenant_caps keeps the positive numbers of the tenant's maxima; anything
# else is "not set" (and denied below).
tenant_caps := {k: v | some k, v in tenant_max; is_number(v); v > 0}

# caps is the most each limit may be, min(platform max, tenant max), and
# capped_defaults what a run gets for a limit it does not request,
# min(platform default, cap). Both depend on the tenant alone (computed once
# per tenant, see policy.tenantOnlyRefs).
caps := {k: min([pmax, object.get(tenant_caps, k, pmax)]) | some k, pmax in platform.limits_max}

capped_defaults := {k: min([platform.limits_default[k], cap]) | some k, cap in caps}

# effective is the decided limits object, every key always:
# min(requested or platform default, platform max, tenant max). A limit is
# requested when it is a positive number; anything else is "not set" (and
# denied below). The request's limits are read from input directly: a
# request without them asks for none, and one that sets no limit (all 0, as
# the gateway sends it) gets the capped defaults in one step.
effective := capped_defaults if {
	input.request.limits == unrequested
} else := object.union(capped_defaults, {k: min([v, cap]) |
	some k, cap in caps
	v := input.request.limits[k]
	v > 0
	is_number(v)
})

# violations cover the tenant's maxima and the request's limits. A request
# that sets no limit is recognised in one step; request_violations checks
# any other.
violations := tenant_violations if {
	input.request.limits == unrequested
} else := tenant_violations | request_violations

request_violations contains sprintf("limits.%s must be a non-negative integer", [k]) if {
	some k, _ in platform.limits_max
	r := input.request.limits[k]
	r != 0 # 0 means "not requested"
	not valid_request(r)
}

# A requested key that names no limit is denied; limits that are not an
# object name none (for an array, every index is denied).
request_violations contains sprintf("limits.%v is not a known limit", [k]) if {
	is_object(input.request.limits)
	some k in (object.keys(input.request.limits) - limit_keys)
}

request_violations contains sprintf("limits.%v is not a known limit", [k]) if {
	is_array(input.request.limits)
	some k, _ in input.request.limits
}

# limit_keys and unrequested depend on the platform alone: the limits' names,
# and the limits of a request that sets none, as the gateway sends it (every
# limit 0).
limit_keys := object.keys(platform.limits_max)

unrequested := {k: 0 | some k in limit_keys}

# tenant_violations depend on input.tenant alone (computed once per tenant).
tenant_violations contains sprintf("tenant %q policy data max_limits.%s must be a positive number", [access.tenant_id, k]) if {
	some k, _ in tenant_max
	platform.limits_max[k]
	not tenant_caps[k]
}

# valid_request(r): r is a non-negative integer.
valid_request(r) if {
	is_number(r)
	r >= 0
	r == floor(r)
}
