package execgate.network_test

import data.execgate.network

base := {
	"tenant": {"id": "t1", "data": {"network": ["none", "proxy"]}},
	"subject": {"sub": "u1", "roles": ["executor"]},
	"request": {"network_access": "none", "mode": "run"},
}

with_request(r) := object.union(base, {"request": r})

test_none_is_the_default if {
	network.mode == "none" with input as object.remove(base, ["request"])
}

test_none_is_always_allowed if {
	inp := object.union(base, {"tenant": {"data": {"network": []}}})
	network.mode == "none" with input as inp
	count(network.violations) == 0 with input as inp
}

test_proxy_allowed_by_tenant_data if {
	network.mode == "proxy" with input as with_request({"network_access": "proxy"})
}

test_proxy_denied_without_tenant_grant if {
	inp := object.union(with_request({"network_access": "proxy"}), {"tenant": {"data": {"network": ["none"]}}})
	`network_access "proxy" is not allowed for tenant "t1"` in network.violations with input as inp
	network.mode == "none" with input as inp
}

test_host_needs_tenant_grant if {
	inp := object.union(with_request({"network_access": "host"}), {"subject": {"roles": ["executor", "admin"]}})
	`network_access "host" is not allowed for tenant "t1"` in network.violations with input as inp
}

test_host_needs_admin if {
	inp := object.union(with_request({"network_access": "host"}), {"tenant": {"data": {"network": ["host"]}}})
	v := network.violations with input as inp
	"network_access host requires role admin" in v
	count(v) == 1
}

test_host_for_admin_with_tenant_grant if {
	inp := object.union(with_request({"network_access": "host"}), {
		"tenant": {"data": {"network": ["host"]}},
		"subject": {"roles": ["executor", "admin"]},
	})
	network.mode == "host" with input as inp
	count(network.violations) == 0 with input as inp
}

test_unknown_mode_is_denied if {
	inp := with_request({"network_access": "bridge"})
	`network_access "bridge" is not none, proxy or host` in network.violations with input as inp
	network.mode == "none" with input as inp
}

test_test_mode_forces_none_without_denial if {
	inp := object.union(with_request({"network_access": "host", "mode": "test"}), {"tenant": {"data": {"network": []}}})
	network.mode == "none" with input as inp
	count(network.violations) == 0 with input as inp
}

test_missing_network_access_is_none if {
	inp := object.union(object.remove(base, ["request"]), {"request": {"mode": "run"}})
	network.mode == "none" with input as inp
	count(network.violations) == 0 with input as inp
}

test_host_without_roles_needs_admin if {
	inp := object.union(object.remove(with_request({"network_access": "host"}), ["subject"]), {"tenant": {"data": {"network": ["host"]}}})
	"network_access host requires role admin" in network.violations with input as inp
}
