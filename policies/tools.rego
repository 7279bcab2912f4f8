# Host tools (code mode, DESIGN §14). Tool names are "<server>.<tool>"; the
# tenant's data lists what it may call, as names or globs ("search.*",
# "crm.lookup"). A run gets the tools it asks for when the tenant's list
# covers them (asking for none means all the tenant's tools); asking for a
# tool the tenant lacks is denied. Test mode gets no tools (it uses
# fixtures).
#
# Each call a run makes is decided again (data.execgate.main.tool_call) with
# input.call: {tool, server, name, args_bytes, index, elapsed_ms, counts,
# decision_id}. The defaults below read the tenant's data:
#
#     tool_calls:
#       max_per_run: {"payments.*": 3}     # calls matching the glob, per run
#       deny_roles: {"shell.*": ["executor"]}
#
# Security teams add their own rules as `deny_tool_call contains reason if
# { … }` in package execgate.main.
package execgate.tools

import data.execgate.access

tenant_tools := {t | some t in input.tenant.data.tools; is_string(t)}

# all_tools is every tool of the tenant, sorted (depends on the tenant alone).
all_tools := sort(tenant_tools)

# covered: the requested name or glob t is in the tenant's list or matched
# by one of its globs.
covered(t) if t in tenant_tools

covered(t) if {
	some p in tenant_tools
	glob.match(p, ["."], t)
}

# granted is the decided tool list (sorted): none in test mode, else the
# requested tools the tenant has, or all of them for a request naming none
# (an empty list, or no tools list at all).
granted := [] if {
	input.request.mode == "test"
} else := sort({t | some t in input.request.tools; covered(t)}) if {
	count(input.request.tools) > 0
} else := all_tools

violations contains sprintf("tool %q is not granted to tenant %q", [t, access.tenant_id]) if {
	some t in input.request.tools
	not covered(t)
	not input.request.mode == "test"
}

# Per-call rules (input.call).

rules := object.get(input.tenant.data, "tool_calls", {})

call_violations contains sprintf("at most %d calls to %s per run", [n, p]) if {
	some p, n in object.get(rules, "max_per_run", {})
	glob.match(p, ["."], input.call.tool)
	sum([c | some t, c in input.call.counts; glob.match(p, ["."], t)]) >= n
}

call_violations contains sprintf("%s is denied for role %s", [input.call.tool, r]) if {
	some p, roles in object.get(rules, "deny_roles", {})
	glob.match(p, ["."], input.call.tool)
	some r in roles
	r in input.subject.roles
}
