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
import data.execgate.egress
import data.execgate.limits
import data.execgate.network
import data.execgate.packages
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
})

decision := {
	"allow": allow,
	"reasons": sort(deny),
	"network_access": network_access,
	"limits": limits.effective,
	"egress": {"allow": egress_allow},
	"requirements_allowed": packages.allowed,
	"tools": tools_granted,
	"audit": {"record_source": access.record_source},
}

allow := count(deny) == 0

# A denied decision grants nothing: no network, no egress, no tools.
default network_access := "none"

network_access := network.mode if allow

default egress_allow := []

egress_allow := egress.allow if allow

default tools_granted := []

tools_granted := tools.granted if allow
