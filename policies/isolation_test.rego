package execgate.isolation_test

import data.execgate.main

base := {
	"version": 1,
	"tenant": {"id": "acme", "plan": "standard", "data": {"network": ["none", "proxy"], "isolation": ["jail", "process"]}},
	"subject": {"sub": "u1", "roles": ["executor"]},
	"request": {
		"language": "python", "entrypoint": "run", "source_sha256": "0000", "source_bytes": 10,
		"args_bytes": 2, "requirements": [], "packages": [], "network_access": "none", "egress_hosts": [],
		"limits": {}, "mode": "run", "tools": [], "isolation": "jail",
	},
}

with_request(patch) := object.union(base, {"request": object.union(base.request, patch)})

with_tenant_data(data_) := json.patch(base, [{"op": "replace", "path": "/tenant/data", "value": data_}])

test_jail_is_the_default if {
	d := main.decision with input as base
	d.allow
	d.isolation == "jail"
}

test_a_request_without_isolation_gets_jail if {
	d := main.decision with input as object.union(base, {"request": object.remove(base.request, ["isolation"])})
	d.allow
	d.isolation == "jail"
}

test_a_granted_tenant_gets_process if {
	d := main.decision with input as with_request({"isolation": "process"})
	d.allow
	d.reasons == []
	d.isolation == "process"
}

test_a_tenant_without_the_key_is_denied_process if {
	d := main.decision with input as json.patch(with_request({"isolation": "process"}), [{"op": "replace", "path": "/tenant/data", "value": {}}])
	not d.allow
	d.isolation == "jail"
	d.reasons == [`isolation "process" is not allowed for tenant "acme" (its levels: jail)`]
}

test_a_tenant_granted_jail_only_is_denied_process if {
	d := main.decision with input as json.patch(with_request({"isolation": "process"}), [{"op": "replace", "path": "/tenant/data", "value": {"isolation": ["jail"]}}])
	not d.allow
	d.isolation == "jail"
}

test_an_unknown_level_is_denied if {
	d := main.decision with input as with_request({"isolation": "vm"})
	not d.allow
	d.reasons == [`isolation "vm" is not jail or process`]
}

test_process_is_not_offered_with_proxy if {
	d := main.decision with input as with_request({"isolation": "process", "network_access": "proxy"})
	not d.allow
	"isolation process is not offered with network_access proxy: egress attempts could not be attributed to one run" in d.reasons
}

test_process_is_not_offered_in_test_mode if {
	d := main.decision with input as with_request({"isolation": "process", "mode": "test"})
	not d.allow
	d.reasons == ["isolation process is not offered in test mode: capability testing runs at level jail"]
}

test_process_is_offered_for_javascript_and_typescript if {
	every language in ["javascript", "typescript"] {
		d := main.decision with input as with_request({"isolation": "process", "language": language})
		d.allow
		d.reasons == []
		d.isolation == "process"
	}
}

test_javascript_with_packages_is_not_offered_process if {
	d := main.decision with input as with_request({"isolation": "process", "language": "javascript", "requirements": ["left-pad@1.3.0"]})
	not d.allow
	"isolation process is not offered with requirements: runs with packages run at level jail" in d.reasons
}

test_process_is_not_offered_with_requirements if {
	d := main.decision with input as with_request({"isolation": "process", "requirements": ["six==1.16.0"]})
	not d.allow
	"isolation process is not offered with requirements: runs with packages run at level jail" in d.reasons
}

test_isolation_data_of_the_wrong_type_denies if {
	d := main.decision with input as with_tenant_data({"isolation": "process"})
	not d.allow
	"tenant policy data isolation must be array, not string" in d.reasons
}

test_process_is_not_offered_with_a_resolved_package_set if {
	d := main.decision with input as with_request({"isolation": "process", "packages": [{"name": "six", "version": "1.16.0", "index": "", "via": ["six"]}]})
	not d.allow
	"isolation process is not offered with packages: runs with packages run at level jail" in d.reasons
}
