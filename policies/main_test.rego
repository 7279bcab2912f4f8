package execgate.main_test

import data.execgate.main
import data.execgate.platform

base := {
	"version": 1,
	"tenant": {"id": "demo", "plan": "standard", "data": {
		"network": ["none", "proxy"],
		"egress_allow": ["*.example.com:443"],
		"packages": {"allow": ["six"], "deny": []},
		"max_limits": {"timeout_ms": 30000, "memory_mb": 512},
		"tools": [],
	}},
	"subject": {"sub": "u1", "roles": ["executor"]},
	"request": {
		"language": "python",
		"entrypoint": "run",
		"source_sha256": "0000",
		"source_bytes": 10,
		"args_bytes": 2,
		"requirements": [],
		"network_access": "none",
		"egress_hosts": [],
		"limits": {},
		"mode": "run",
		"tools": [],
	},
}

test_default_request_is_allowed_with_defaults if {
	d := main.decision with input as base
	d.allow == true
	d.reasons == []
	d.network_access == "none"
	d.limits == platform.limits_default
	d.egress.allow == []
	d.requirements_allowed == true
	d.tools == []
	d.audit.record_source == false
}

test_empty_input_is_denied_with_reasons if {
	d := main.decision with input as {}
	d.allow == false
	"unknown tenant" in d.reasons
	"subject lacks role executor" in d.reasons
	d.network_access == "none"
	d.limits == platform.limits_default
}

test_every_violation_is_a_reason if {
	inp := object.union(base, {
		"subject": {"roles": []},
		"request": {"network_access": "host", "requirements": ["pip"], "limits": {"pids": -1}, "egress_hosts": ["bad host"], "tools": ["x"]},
	})
	d := main.decision with input as inp
	d.allow == false
	d.reasons == [
		`egress host "bad host" is not a valid host[:port] pattern`,
		"limits.pids must be a non-negative integer",
		`network_access "host" is not allowed for tenant "demo"`,
		"network_access host requires role admin",
		`package "pip" is not in tenant "demo"'s allow-list`,
		`package "pip" is on the platform deny-list`,
		"subject lacks role executor",
		`tool "x" is not granted to tenant "demo"`,
	]
	d.network_access == "none"
	d.requirements_allowed == false
}

test_proxy_run_gets_egress if {
	inp := object.union(base, {"request": {"network_access": "proxy", "egress_hosts": ["api.example.com"]}})
	d := main.decision with input as inp
	d.allow
	d.network_access == "proxy"
	d.egress.allow == ["api.example.com:443"]
}

test_proxy_run_asking_for_an_unlisted_host_is_denied_naming_it if {
	inp := object.union(base, {"request": {"network_access": "proxy", "egress_hosts": ["api.example.com", "evil.test"]}})
	d := main.decision with input as inp
	not d.allow
	d.reasons == [`egress host "evil.test" is not in the tenant's egress allow-list`]
	d.egress.allow == []
}

test_test_mode_forces_none_and_no_tools if {
	inp := object.union(base, {
		"tenant": {"data": {"tools": ["search"]}},
		"request": {"mode": "test", "network_access": "proxy", "egress_hosts": ["api.example.com"]},
	})
	d := main.decision with input as inp
	d.allow
	d.network_access == "none"
	d.egress.allow == []
	d.tools == []
}

test_extension_deny_wins if {
	d := main.decision with input as base with main.deny as {"extension says no"}
	d.allow == false
	d.reasons == ["extension says no"]
}

test_denied_decision_grants_nothing if {
	inp := object.union(base, {
		"subject": {"roles": ["executor", "admin"]},
		"tenant": {"data": {"tools": ["search"]}},
		"request": {"network_access": "proxy", "egress_hosts": ["api.example.com"], "requirements": ["numpy"]},
	})
	d := main.decision with input as inp
	not d.allow
	d.network_access == "none"
	d.egress.allow == []
	d.tools == []
}

tool_call_input := {
	"tenant": {"id": "t1", "data": {"tool_calls": {"deny_roles": {"shell.*": ["executor"]}}}},
	"subject": {"sub": "u", "roles": ["executor"]},
	"call": {"tool": "math.add", "server": "math", "index": 0, "counts": {}},
}

test_tool_call_allowed_without_violations if {
	main.tool_call == {"allow": true, "reasons": []} with input as tool_call_input
}

test_tool_call_denied_with_the_reasons if {
	inp := object.union(tool_call_input, {"call": {"tool": "shell.exec"}})
	main.tool_call == {"allow": false, "reasons": ["shell.exec is denied for role executor"]} with input as inp
}
