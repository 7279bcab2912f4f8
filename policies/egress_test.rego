package execgate.egress_test

import data.execgate.egress

base := {
	"tenant": {"id": "t1", "data": {
		"network": ["proxy"],
		"egress_allow": ["*.example.com:443", "pypi.org", "files.example.org:*", "API.Upper.test:8443"],
	}},
	"subject": {"roles": ["executor"]},
	"request": {"network_access": "proxy", "mode": "run", "egress_hosts": []},
}

allow_for(hosts) := a if {
	a := egress.allow with input as object.union(base, {"request": {"egress_hosts": hosts}})
}

test_exact_host_with_port if {
	allow_for(["api.example.com:443"]) == ["api.example.com:443"]
}

test_host_without_port_takes_pattern_port if {
	allow_for(["api.example.com"]) == ["api.example.com:443"]
}

test_deep_subdomain_matches_wildcard if {
	allow_for(["a.b.example.com:443"]) == ["a.b.example.com:443"]
}

test_wildcard_does_not_match_apex if {
	allow_for(["example.com:443"]) == []
}

test_wrong_port_is_dropped if {
	allow_for(["api.example.com:80"]) == []
}

test_unlisted_host_is_dropped if {
	allow_for(["evil.com", "evil.com:443"]) == []
}

test_pattern_without_port_keeps_request_port if {
	allow_for(["pypi.org:443", "pypi.org"]) == ["pypi.org", "pypi.org:443"]
}

test_any_port_pattern if {
	allow_for(["files.example.org:8080"]) == ["files.example.org:8080"]
}

test_requested_wildcard_is_narrowed_to_pattern if {
	allow_for(["*.example.com"]) == ["*.example.com:443"]
}

test_requested_narrower_wildcard_is_kept if {
	allow_for(["*.api.example.com:*"]) == ["*.api.example.com:443"]
}

test_requested_broader_wildcard_narrows_to_pattern if {
	inp := object.union(base, {
		"tenant": {"data": {"egress_allow": ["*.api.example.com"]}},
		"request": {"egress_hosts": ["*.example.com:443"]},
	})
	egress.allow == ["*.api.example.com:443"] with input as inp
}

test_requested_wildcard_matches_concrete_pattern if {
	inp := object.union(base, {"tenant": {"data": {"egress_allow": ["api.example.com:443"]}}, "request": {"egress_hosts": ["*.example.com"]}})
	egress.allow == ["api.example.com:443"] with input as inp
}

test_star_pattern_allows_any_request if {
	inp := object.union(base, {"tenant": {"data": {"egress_allow": ["*"]}}, "request": {"egress_hosts": ["x.test:1"]}})
	egress.allow == ["x.test:1"] with input as inp
}

test_star_request_takes_patterns if {
	inp := object.union(base, {"tenant": {"data": {"egress_allow": ["a.test:443"]}}, "request": {"egress_hosts": ["*"]}})
	egress.allow == ["a.test:443"] with input as inp
}

test_tenant_patterns_compare_lower_case if {
	allow_for(["api.upper.test:8443"]) == ["api.upper.test:8443"]
}

test_no_egress_without_proxy if {
	inp := object.union(base, {"request": {"network_access": "none", "egress_hosts": ["api.example.com"]}})
	egress.allow == [] with input as inp
}

test_invalid_entries_are_denied if {
	inp := object.union(base, {"request": {"egress_hosts": ["http://x.com", "x.com:99999", "a:b:c"]}})
	v := egress.violations with input as inp
	`egress host "http://x.com" is not a valid host[:port] pattern` in v
	`egress host "x.com:99999" is not a valid host[:port] pattern` in v
	`egress host "a:b:c" is not a valid host[:port] pattern` in v
}

test_port_zero_is_invalid if {
	`egress host "x.com:0" is not a valid host[:port] pattern` in egress.violations with input as object.union(base, {"request": {"egress_hosts": ["x.com:0"]}})
}

test_entry_re_is_built_from_label_and_port if {
	egress.entry_re == concat("", [`^(\*|(\*\.)?`, egress.label, `(\.`, egress.label, `)*)(:`, egress.port, `)?$`])
}

violations_for(hosts) := v if {
	v := egress.violations with input as object.union(base, {"request": {"egress_hosts": hosts}})
}

test_unlisted_host_denies_naming_it if {
	violations_for(["evil.com:443", "api.example.com"]) == {`egress host "evil.com:443" is not in the tenant's egress allow-list`}
}

test_wrong_port_denies_naming_it if {
	violations_for(["api.example.com:80"]) == {`egress host "api.example.com:80" is not in the tenant's egress allow-list`}
}

test_wildcard_apex_denies if {
	violations_for(["example.com"]) == {`egress host "example.com" is not in the tenant's egress allow-list`}
}

test_met_and_narrowed_entries_do_not_deny if {
	violations_for(["api.example.com", "*.example.com", "files.example.org:8080", "pypi.org:443", "*"]) == set()
}

test_requested_wildcard_without_overlap_denies if {
	violations_for(["*.other.test"]) == {`egress host "*.other.test" is not in the tenant's egress allow-list`}
}

test_no_denial_when_the_run_gets_no_proxy if {
	inp := object.union(base, {"request": {"mode": "test", "egress_hosts": ["evil.com"]}})
	egress.violations == set() with input as inp
}

test_unlisted_host_denies_the_decision if {
	d := data.execgate.main.decision with input as object.union(base, {"request": {"egress_hosts": ["evil.com"]}})
	d.allow == false
	`egress host "evil.com" is not in the tenant's egress allow-list` in d.reasons
}
