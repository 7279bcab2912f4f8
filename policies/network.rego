# Network mode: none unless the tenant's data allows more; host only when the
# tenant allows it and the subject is an admin; test mode always runs with
# none.
package execgate.network

import data.execgate.access

import data.execgate.platform

default requested := "none"

requested := input.request.network_access

tenant_modes := {m | some m in input.tenant.data.network}

in_test_mode if input.request.mode == "test"

admin if "admin" in input.subject.roles

# mode is the decided network mode: the request's, or none when the request
# is test mode or asks for a mode it may not have.
default mode := "none"

mode := requested if {
	not in_test_mode
	count(violations) == 0
}

violations contains sprintf("network_access %q is not none, proxy or host", [requested]) if {
	not requested in platform.network_modes
}

violations contains sprintf("network_access %q is not allowed for tenant %q", [requested, access.tenant_id]) if {
	not in_test_mode
	requested in {"proxy", "host"}
	not requested in tenant_modes
}

violations contains "network_access host requires role admin" if {
	not in_test_mode
	requested == "host"
	not admin
}
