# Runtimes (DESIGN §15): the Python a run gets. A run names one with
# "runtime" ("python3.11", "python3.13"); one that names none gets its
# tenant's default, the first of the tenant's list. A security team grants
# runtimes per tenant in its policy data:
#
#     tenants:
#       - id: acme
#         policy:
#           runtimes: [python3.13, python3.11]   # default: [python3.11]
#
# A runtime the tenant is not granted is denied with a reason naming it;
# it is never quietly replaced by another. JavaScript and TypeScript runs
# choose by language and name no runtime.
package execgate.runtimes

import data.execgate.access
import data.execgate.platform

# tenant_runtimes are the runtimes a tenant may use, in its order: its
# policy data's "runtimes" (a list), or the platform default alone.
tenant_runtimes := [r | some r in access.tenant_data.runtimes] if is_array(access.tenant_data.runtimes)

else := [platform.runtime_default]

# default_runtime is the tenant's default: the first of its runtimes (the
# gateway fills it in before asking, policy.BuildInput; a test keeps the
# two in step).
default_runtime := tenant_runtimes[0] if count(tenant_runtimes) > 0

else := platform.runtime_default

python if input.request.language == "python"

# requested is the runtime the run asked for, or its tenant's default.
requested := input.request.runtime if {
	is_string(input.request.runtime)
	input.request.runtime != ""
} else := default_runtime if python

else := ""

# runtime is the decided runtime: a Python run's, "" for other languages.
runtime := requested if python

else := ""

# violations: the common case (a granted Python runtime, or another
# language naming none) is one step.
violations := set() if {
	python
	requested in tenant_runtimes
	requested in platform.runtimes
} else := set() if {
	not python
	requested == ""
} else := request_violations

request_violations contains sprintf("runtime %q is not one of %s", [requested, concat(", ", sort(platform.runtimes))]) if {
	python
	not requested in platform.runtimes
}

request_violations contains sprintf("runtime %q is not allowed for tenant %q (its runtimes: %s)", [requested, access.tenant_id, concat(", ", tenant_runtimes)]) if {
	python
	requested in platform.runtimes
	not requested in tenant_runtimes
}

request_violations contains sprintf("runtime %q applies to python only: language %q runs choose by language", [requested, input.request.language]) if {
	not python
	requested != ""
}
