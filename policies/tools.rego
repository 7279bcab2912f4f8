# Host tools: a run gets the tools it asks for when the tenant's data grants
# them (asking for none means all the tenant's tools); asking for a tool the
# tenant lacks is denied. Test mode gets no tools (it uses fixtures).
package execgate.tools

import data.execgate.access

tenant_tools := {t | some t in input.tenant.data.tools; is_string(t)}

# all_tools is every tool of the tenant, sorted (depends on the tenant alone).
all_tools := sort(tenant_tools)

# granted is the decided tool list (sorted): none in test mode, else the
# requested tools the tenant has, or all of them for a request naming none
# (an empty list, or no tools list at all).
granted := [] if {
	input.request.mode == "test"
} else := sort({t | some t in input.request.tools; t in tenant_tools}) if {
	count(input.request.tools) > 0
} else := all_tools

violations contains sprintf("tool %q is not granted to tenant %q", [t, access.tenant_id]) if {
	some t in input.request.tools
	not t in tenant_tools
	not input.request.mode == "test"
}
