# The decision entry point, data.execgate.main.decision (DESIGN §6).
#
# Default deny: a run is allowed only when no module adds a reason to deny.
# Each concern lives in its own package (access, network, limits, egress,
# packages, tools; numbers in platform.rego) and reports its violations here.
#
# Extending: add a module to package execgate.main with
#
#     deny contains "why" if { ... }
#
# OPA merges the deny set across files, so any deny from any module wins and
# its reason is returned. Extra modules cannot define decision or the
# platform packages (the policy engine refuses them), so they can add denials
# but never turn one into an allow.
package execgate.main

import data.execgate.access
import data.execgate.callbacks
import data.execgate.egress
import data.execgate.isolation
import data.execgate.limits
import data.execgate.network
import data.execgate.packages
import data.execgate.runtimes
import data.execgate.secrets
import data.execgate.tools

deny contains reason if some reason in baseline

# baseline collects the default concerns' violations in one set (one rule
# for the evaluator to run instead of one per concern).
baseline := union({
	access.violations,
	network.violations,
	limits.violations,
	egress.violations,
	packages.violations,
	tools.violations,
	isolation.violations,
	runtimes.violations,
	secrets.violations,
})

# decision is the answer: an allowed run gets what its concerns decided; a
# denied decision grants nothing (no network, no egress, no tools, no
# secrets) and lists the reasons. Both branches name every key of the decision, so an allowed
# run costs one evaluation of deny. The else branch states its condition: if
# the allowed branch could not be built, the decision stays undefined (a
# PolicyError) rather than becoming a denial without reasons.
decision := {
	"allow": true,
	"reasons": [],
	"network_access": network.mode,
	"limits": limits.effective,
	"egress": {"allow": egress.allow},
	"requirements_allowed": packages.allowed,
	"tools": tools.granted,
	"audit": {"record_source": access.record_source},
	"isolation": isolation.level,
	"runtime": runtimes.runtime,
	"secrets": secrets.granted,
} if {
	count(deny) == 0
} else := {
	"allow": false,
	"reasons": sort(deny),
	"network_access": "none",
	"limits": limits.effective,
	"egress": {"allow": []},
	"requirements_allowed": packages.allowed,
	"tools": [],
	"audit": {"record_source": access.record_source},
	"isolation": "jail",
	"runtime": "",
	"secrets": [],
} if {
	count(deny) > 0
}

# tool_call is the answer for one tool call of an allowed run (input.call,
# see tools.rego): allowed unless some module adds a reason to
# deny_tool_call. Extension modules add rules the same way as for deny:
#
#     deny_tool_call contains "why" if { ... }
tool_call := {"allow": count(deny_tool_call) == 0, "reasons": sort(deny_tool_call)}

deny_tool_call contains reason if some reason in tools.call_violations

# callback is the answer for the callback_url of an async execution
# (input.callback, see callbacks.rego), asked at submit: allowed unless some
# module adds a reason to deny_callback. Extension modules add rules the
# same way as for deny:
#
#     deny_callback contains "why" if { ... }
callback := {"allow": count(deny_callback) == 0, "reasons": sort(deny_callback)}

deny_callback contains reason if some reason in callbacks.violations
