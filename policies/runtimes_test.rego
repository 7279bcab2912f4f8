package execgate.runtimes_test

import data.execgate.main
import data.execgate.runtimes

base := {
	"version": 1,
	"tenant": {"id": "acme", "plan": "standard", "data": {}},
	"subject": {"sub": "u1", "roles": ["executor"]},
	"request": {
		"language": "python", "entrypoint": "run", "source_sha256": "0000", "source_bytes": 10,
		"args_bytes": 2, "requirements": [], "packages": [], "network_access": "none", "egress_hosts": [],
		"limits": {}, "mode": "run", "tools": [], "isolation": "jail", "runtime": "",
	},
}

with_request(patch) := object.union(base, {"request": object.union(base.request, patch)})

with_runtimes(rts) := json.patch(base, [{"op": "replace", "path": "/tenant/data", "value": {"runtimes": rts}}])

test_a_tenant_without_the_key_gets_python311 if {
	d := main.decision with input as base
	d.allow
	d.runtime == "python3.11"
}

test_a_tenant_without_the_key_is_denied_python313 if {
	d := main.decision with input as with_request({"runtime": "python3.13"})
	not d.allow
	d.reasons == [`runtime "python3.13" is not allowed for tenant "acme" (its runtimes: python3.11)`]
	d.runtime == ""
}

test_a_granted_runtime_is_decided if {
	d := main.decision with input as json.patch(with_runtimes(["python3.11", "python3.13"]), [{"op": "replace", "path": "/request/runtime", "value": "python3.13"}])
	d.allow
	d.runtime == "python3.13"
}

test_the_default_is_the_first_of_the_tenants_list if {
	runtimes.default_runtime == "python3.13" with input as with_runtimes(["python3.13", "python3.11"])
	d := main.decision with input as with_runtimes(["python3.13", "python3.11"])
	d.allow
	d.runtime == "python3.13"
}

test_an_unknown_runtime_is_denied if {
	d := main.decision with input as json.patch(with_runtimes(["python2.7"]), [{"op": "replace", "path": "/request/runtime", "value": "python2.7"}])
	not d.allow
	d.reasons == [`runtime "python2.7" is not one of host, python3.11, python3.13`]
}

test_host_must_be_granted if {
	d := main.decision with input as with_request({"runtime": "host"})
	not d.allow
	d2 := main.decision with input as json.patch(with_runtimes(["host"]), [{"op": "replace", "path": "/request/runtime", "value": "host"}])
	d2.allow
	d2.runtime == "host"
}

test_javascript_names_no_runtime if {
	d := main.decision with input as with_request({"language": "javascript"})
	d.allow
	d.runtime == ""
	d2 := main.decision with input as with_request({"language": "javascript", "runtime": "python3.11"})
	not d2.allow
	d2.reasons == [`runtime "python3.11" applies to python only: language "javascript" runs choose by language`]
}

test_runtimes_data_of_the_wrong_type_denies if {
	d := main.decision with input as with_runtimes("python3.13")
	not d.allow
	"tenant policy data runtimes must be array, not string" in d.reasons
}

test_an_empty_list_grants_no_runtime if {
	runtimes.default_runtime == "python3.11" with input as with_runtimes([])
	d := main.decision with input as with_runtimes([])
	not d.allow
	d.reasons == [`runtime "python3.11" is not allowed for tenant "acme" (its runtimes: )`]
}
