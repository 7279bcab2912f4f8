# Isolation level (DESIGN §14): how a run is separated from the tenant's
# other runs.
#
#   jail     a fresh nsjail per run: its own namespaces, cgroups and
#            interpreter. The default for every tenant, and what a denied
#            decision says.
#   process  a fresh process per run, forked from a warm jail of the tenant
#            (a zygote, built by the same profile: seccomp, filesystem and
#            network containment unchanged) with a private empty /tmp, its
#            own cgroup limits and nothing left when its envelope is made;
#            for JavaScript and TypeScript that process is a fresh Deno,
#            started ahead of the run.
#            Runs of the same tenant then share the zygote's pid, network
#            and IPC namespaces and host uid: a tenant whose runs must not
#            see each other at that level keeps jail.
#
# A security team grants process per tenant in its policy data:
#
#     tenants:
#       - id: acme
#         policy:
#           isolation: [jail, process]
#
# and a run asks for it with "isolation": "process". A request for process
# that is not granted, or that process cannot honour, is denied with a
# reason; it is never quietly run at another level.
package execgate.isolation

import data.execgate.access
import data.execgate.platform

# tenant_levels are the levels a tenant may use: its policy data's
# "isolation" (a list), or jail alone.
tenant_levels := {l | some l in access.tenant_data.isolation} if is_array(access.tenant_data.isolation)

else := {"jail"}

default requested := "jail"

requested := input.request.isolation if {
	is_string(input.request.isolation)
	input.request.isolation != ""
}

# level is the decided level: process only when asked for and allowed.
default level := "jail"

level := "process" if {
	requested == "process"
	count(request_violations) == 0
}

# violations: a run asking for jail (the default) needs no check.
violations := set() if {
	requested == "jail"
} else := request_violations

request_violations contains sprintf("isolation %q is not jail or process", [requested]) if {
	not requested in platform.isolation_levels
}

request_violations contains sprintf("isolation %q is not allowed for tenant %q (its levels: %s)", [requested, access.tenant_id, concat(", ", sort(tenant_levels))]) if {
	requested in platform.isolation_levels
	not requested in tenant_levels
}

# Where a guarantee of level process cannot hold, it is not offered:

# network proxy: the egress proxy attributes each connection to its run by
# the run's own socket; a zygote has one for all its runs.
request_violations contains "isolation process is not offered with network_access proxy: egress attempts could not be attributed to one run" if {
	requested == "process"
	input.request.network_access == "proxy"
}

# test mode (capability testing) runs at level jail: fixtures and the
# checks made on them are meant for the level every tenant has. A platform
# that wants test runs at process changes this rule.
request_violations contains "isolation process is not offered in test mode: capability testing runs at level jail" if {
	requested == "process"
	input.request.mode == "test"
}

# A zygote binds no package environment.
request_violations contains "isolation process is not offered with requirements: runs with packages run at level jail" if {
	requested == "process"
	count(input.request.requirements) > 0
}

request_violations contains "isolation process is not offered with packages: runs with packages run at level jail" if {
	requested == "process"
	count(input.request.packages) > 0
}
