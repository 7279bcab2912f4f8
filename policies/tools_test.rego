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
