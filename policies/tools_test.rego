package execgate.tools_test

import data.execgate.tools

base := {
	"tenant": {"id": "t1", "data": {"tools": ["search", "calendar"]}},
	"request": {"mode": "run", "tools": []},
}

test_unrequested_gets_all_tenant_tools if {
	tools.granted == ["calendar", "search"] with input as base
}

test_requested_subset_is_granted if {
	tools.granted == ["search"] with input as object.union(base, {"request": {"tools": ["search"]}})
}

test_ungranted_tool_is_denied if {
	inp := object.union(base, {"request": {"tools": ["search", "shell"]}})
	`tool "shell" is not granted to tenant "t1"` in tools.violations with input as inp
	tools.granted == ["search"] with input as inp
}

test_test_mode_gets_no_tools if {
	inp := object.union(base, {"request": {"mode": "test", "tools": ["shell"]}})
	tools.granted == [] with input as inp
	count(tools.violations) == 0 with input as inp
}

test_tenant_without_tools if {
	tools.granted == [] with input as {"tenant": {"id": "t1", "data": {}}, "request": {"mode": "run"}}
}

test_missing_tools_gets_all_tenant_tools if {
	tools.granted == ["calendar", "search"] with input as {"tenant": base.tenant, "request": {"mode": "run"}}
}

test_globs_cover_requested_tools if {
	inp := {"tenant": {"id": "t1", "data": {"tools": ["search.*", "crm.lookup"]}}, "request": {"mode": "run", "tools": ["search.web", "search.*", "crm.lookup"]}}
	tools.granted == ["crm.lookup", "search.*", "search.web"] with input as inp
	count(tools.violations) == 0 with input as inp
}

test_glob_does_not_cover_other_servers if {
	inp := {"tenant": {"id": "t1", "data": {"tools": ["search.*"]}}, "request": {"mode": "run", "tools": ["crm.*", "searchx.web"]}}
	tools.granted == [] with input as inp
	count(tools.violations) == 2 with input as inp
}

call_base := {
	"tenant": {"id": "t1", "data": {"tool_calls": {"max_per_run": {"payments.*": 3}, "deny_roles": {"shell.*": ["executor"]}}}},
	"subject": {"sub": "u", "roles": ["executor"]},
	"call": {"tool": "payments.charge", "server": "payments", "index": 0, "counts": {}},
}

test_call_under_the_per_run_cap_is_allowed if {
	inp := object.union(call_base, {"call": {"tool": "payments.charge", "counts": {"payments.charge": 1, "payments.refund": 1, "search.web": 5}}})
	count(tools.call_violations) == 0 with input as inp
}

test_call_at_the_per_run_cap_is_denied if {
	inp := object.union(call_base, {"call": {"tool": "payments.refund", "counts": {"payments.charge": 2, "payments.refund": 1}}})
	"at most 3 calls to payments.* per run" in tools.call_violations with input as inp
}

test_call_denied_for_role if {
	inp := object.union(call_base, {"call": {"tool": "shell.exec", "counts": {}}})
	"shell.exec is denied for role executor" in tools.call_violations with input as inp
	count(tools.call_violations) == 0 with input as object.union(inp, {"subject": {"roles": ["admin"]}})
}
