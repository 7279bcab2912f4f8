package execgate.ext.acme_test

import data.execgate.ext.acme
import data.execgate.main

# A Wednesday, 10:00 UTC.
weekday_ns := time.parse_rfc3339_ns("2026-01-07T10:00:00Z")

# A Sunday, 03:00 UTC.
sunday_3am_ns := time.parse_rfc3339_ns("2026-01-04T03:00:00Z")

base := {
	"version": 1,
	"tenant": {"id": "acme", "plan": "standard", "data": {
		"network": ["none", "proxy"],
		"egress_allow": ["*.acme.test:443"],
		"packages": {"allow": ["six", "pip"]},
	}},
	"subject": {"sub": "ci", "roles": ["executor"]},
	"request": {
		"language": "python", "entrypoint": "run", "mode": "run",
		"network_access": "none", "egress_hosts": [], "requirements": [],
		"limits": {}, "tools": [],
	},
}

decide(overrides) := d if {
	d := main.decision with input as object.union(base, overrides) with time.now_ns as weekday_ns
}

test_plain_run_is_allowed if {
	decide({}).allow
}

test_unpinned_requirement_is_denied if {
	d := decide({"request": {"requirements": ["six>=1.0"]}})
	not d.allow
	d.reasons == [`acme: requirement "six>=1.0" must pin an exact version with ==`]
}

test_pinned_requirement_is_allowed if {
	decide({"request": {"requirements": ["six==1.16.0"]}}).allow
}

test_platform_deny_still_applies if {
	# acme's allow-list names pip, and it is pinned: the platform deny-list wins.
	d := decide({"request": {"requirements": ["pip==24.0"]}})
	not d.allow
	d.reasons == [`package "pip" is on the platform deny-list`]
}

test_proxy_without_hosts_is_denied if {
	d := decide({"request": {"network_access": "proxy"}})
	d.reasons == ["acme: proxy runs must name their egress hosts"]
}

test_proxy_with_hosts_is_allowed if {
	d := decide({"request": {"network_access": "proxy", "egress_hosts": ["api.acme.test"]}})
	d.allow
	d.egress.allow == ["api.acme.test:443"]
}

test_free_plan_memory_cap if {
	d := decide({"tenant": {"plan": "free"}, "request": {"limits": {"memory_mb": 1024}}})
	d.reasons == ["acme: free plan runs may request at most 512 MiB of memory"]
	decide({"tenant": {"plan": "free"}, "request": {"limits": {"memory_mb": 512}}}).allow
}

test_maintenance_window if {
	d := main.decision with input as base with time.now_ns as sunday_3am_ns
	d.reasons == ["acme: runs are paused during the Sunday 02:00-04:00 UTC maintenance window"]
}

test_other_tenants_are_unaffected if {
	d := main.decision with input as object.union(base, {"tenant": {"id": "other"}, "request": {"requirements": ["six"]}})
		with time.now_ns as sunday_3am_ns
	d.allow
}

test_helper_outside_window if {
	not acme.in_maintenance(weekday_ns)
	not acme.in_maintenance(time.parse_rfc3339_ns("2026-01-04T05:00:00Z"))
}
