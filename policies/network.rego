# Network mode: none unless the tenant's data allows more; host only when the
# tenant allows it and the subject is an admin; test mode always runs with
# none.
package execgate.network

import data.execgate.access

import data.execgate.platform

tenant_modes := {m | some m in input.tenant.data.network}

# The rules below read input.request.network_access directly: a request
# without one asks for none, which needs no check. Tests on the requested
# mode come first: OPA's rule index evaluates them, so a run asking for none
# (the default) skips the rules that cannot apply to it.

# mode is the decided network mode: the request's, or none when the request
# is test mode or asks for a mode it may not have.
default mode := "none"

mode := requested if {
	requested := input.request.network_access
	requested in {"proxy", "host"}
	not input.request.mode == "test"
	count(violations) == 0
}

# violations: a run asking for none (the default) needs no check;
# request_violations checks any other request.
violations := set() if {
	input.request.network_access == "none"
} else := request_violations

request_violations contains sprintf("network_access %q is not none, proxy or host", [requested]) if {
	requested := input.request.network_access
	not requested in platform.network_modes
}

request_violations contains sprintf("network_access %q is not allowed for tenant %q", [requested, access.tenant_id]) if {
	requested := input.request.network_access
	requested in {"proxy", "host"}
	not input.request.mode == "test"
	not requested in tenant_modes
}

request_violations contains "network_access host requires role admin" if {
	input.request.network_access == "host"
	not input.request.mode == "test"
	not admin
}

# admin is a rule, not an inline check, so that a subject without roles is
# not an admin (see access.has_role).
admin if "admin" in input.subject.roles
