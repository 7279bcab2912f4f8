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

# effective is the decided limits object, every key always:
# min(requested or platform default, platform max, tenant max).
effective := {k: min([object.get(asked, k, platform.limits_default[k]), pmax, object.get(tenant_caps, k, pmax)]) |
	some k, pmax in platform.limits_max
}

violations contains sprintf("limits.%s must be a non-negative integer", [k]) if {
	some k, r in requested
	platform.limits_max[k]
	not valid_request(r)
}

violations contains sprintf("limits.%s is not a known limit", [k]) if {
	some k, _ in requested
	not platform.limits_max[k]
}

violations contains sprintf("tenant %q policy data max_limits.%s must be a positive number", [access.tenant_id, k]) if {
	some k, _ in tenant_max
	platform.limits_max[k]
	not tenant_caps[k]
}

valid_request(r) if {
	is_number(r)
	r >= 0
	r == floor(r)
}
