package execgate.secrets_test

import data.execgate.main
import data.execgate.secrets

base := {
	"version": 1,
	"tenant": {"id": "t1", "plan": "", "data": {"secrets": ["API_KEY", "DB_PASSWORD"]}},
	"subject": {"sub": "u", "roles": ["executor"]},
	"request": {
		"language": "python", "entrypoint": "run", "source_sha256": "", "source_bytes": 1, "args_bytes": 0,
		"requirements": [], "packages": [], "network_access": "none", "egress_hosts": [],
		"limits": {}, "mode": "run", "tools": [], "isolation": "jail", "secrets": [],
	},
}

with_request(r) := object.union(base, {"request": object.union(base.request, r)})

test_a_request_naming_none_gets_none if {
	secrets.granted == [] with input as base
	main.decision.allow with input as base
	main.decision.secrets == [] with input as base
}

test_granted_secrets_are_decided if {
	inp := with_request({"secrets": ["DB_PASSWORD", "API_KEY"]})
	secrets.granted == ["API_KEY", "DB_PASSWORD"] with input as inp
	main.decision.allow with input as inp
	main.decision.secrets == ["API_KEY", "DB_PASSWORD"] with input as inp
}

test_an_ungranted_secret_denies_the_run_naming_it if {
	inp := with_request({"secrets": ["API_KEY", "ROOT_TOKEN"]})
	not main.decision.allow with input as inp
	main.decision.reasons == [`secret "ROOT_TOKEN" is not granted to tenant "t1"`] with input as inp
	main.decision.secrets == [] with input as inp
}

test_a_tenant_without_secrets_grants_none if {
	inp := {"version": 1, "tenant": {"id": "t1", "plan": "", "data": {}}, "subject": base.subject, "request": object.union(base.request, {"secrets": ["API_KEY"]})}
	secrets.violations == {`secret "API_KEY" is not granted to tenant "t1"`} with input as inp
}

test_test_mode_gets_no_real_secrets if {
	inp := with_request({"mode": "test", "secrets": ["ANYTHING"]})
	secrets.granted == [] with input as inp
	count(secrets.violations) == 0 with input as inp
}

test_tenant_secrets_must_be_a_list if {
	inp := object.union(base, {"tenant": {"data": {"secrets": "API_KEY"}}})
	not main.decision.allow with input as inp
	"tenant policy data secrets must be array, not string" in main.decision.reasons with input as inp
}
