# Host tools: a run gets the tools it asks for when the tenant's data grants
# them (asking for none means all the tenant's tools); asking for a tool the
# tenant lacks is denied. Test mode gets no tools (it uses fixtures).
package execgate.tools

import data.execgate.access

default requested := []

requested := input.request.tools

tenant_tools := {t | some t in input.tenant.data.tools; is_string(t)}

in_test_mode if input.request.mode == "test"

# all_tools is every tool of the tenant, sorted (depends on the tenant alone).
all_tools := sort(tenant_tools)

# granted is the decided tool list (sorted).
default granted := []

granted := all_tools if {
	not in_test_mode
	count(requested) == 0
}

granted := sort({t | some t in requested; t in tenant_tools}) if {
	not in_test_mode
	count(requested) > 0
}

violations contains sprintf("tool %q is not granted to tenant %q", [t, access.tenant_id]) if {
	not in_test_mode
	some t in requested
	not t in tenant_tools
}
