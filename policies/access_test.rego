package execgate.access_test

import data.execgate.access

base := {
	"version": 1,
	"tenant": {"id": "t1", "plan": "standard", "data": {}},
	"subject": {"sub": "u1", "roles": ["executor"]},
	"request": {"language": "python", "mode": "run"},
}

test_known_tenant_with_executor_has_no_violations if {
	count(access.violations) == 0 with input as base
}

test_missing_tenant_is_unknown if {
	"unknown tenant" in access.violations with input as object.remove(base, ["tenant"])
}

test_empty_tenant_id_is_unknown if {
	"unknown tenant" in access.violations with input as object.union(base, {"tenant": {"id": ""}})
}

test_tenant_without_data_is_unknown if {
	"unknown tenant" in access.violations with input as object.union(base, {"tenant": {"data": null}})
}

test_disabled_tenant_is_denied if {
	`tenant "t1" is disabled` in access.violations with input as object.union(base, {"tenant": {"data": {"disabled": true}}})
}

test_malformed_tenant_data_is_denied if {
	inp := object.union(base, {"tenant": {"data": {"network": "proxy", "max_limits": []}}})
	v := access.violations with input as inp
	"tenant policy data network must be array, not string" in v
	"tenant policy data max_limits must be object, not array" in v
}

test_missing_executor_role_is_denied if {
	"subject lacks role executor" in access.violations with input as object.union(base, {"subject": {"roles": ["admin"]}})
}

test_missing_roles_is_denied if {
	"subject lacks role executor" in access.violations with input as object.remove(base, ["subject"])
}

test_unsupported_language_is_denied if {
	`language "ruby" is not supported` in access.violations with input as object.union(base, {"request": {"language": "ruby"}})
}

test_unknown_mode_is_denied if {
	`mode "debug" is not run or test` in access.violations with input as object.union(base, {"request": {"mode": "debug"}})
}

test_record_source_defaults_to_false if {
	not access.record_source with input as base
}

test_record_source_follows_tenant_data if {
	access.record_source with input as object.union(base, {"tenant": {"data": {"audit": {"record_source": true}}}})
}

test_missing_language_and_mode_are_denied if {
	v := access.violations with input as object.remove(base, ["request"])
	`language "" is not supported` in v
	`mode "" is not run or test` in v
}

test_tenant_violations_apply_to_a_plain_request if {
	access.violations == {`tenant "t1" is disabled`} with input as object.union(base, {"tenant": {"data": {"disabled": true}}})
}

test_javascript_and_typescript_are_allowed_by_default if {
	count(access.violations) == 0 with input as object.union(base, {"request": {"language": "javascript"}})
	count(access.violations) == 0 with input as object.union(base, {"request": {"language": "typescript"}})
}

test_a_tenant_can_be_limited_to_one_language if {
	limited := object.union(base, {"tenant": {"data": {"languages": ["python"]}}})
	count(access.violations) == 0 with input as limited
	`language "javascript" is not allowed for this tenant (its languages: python)` in access.violations with input as object.union(limited, {"request": {"language": "javascript"}})
}

test_tenant_languages_must_be_a_list if {
	`tenant policy data languages must be array, not string` in access.violations with input as object.union(base, {"tenant": {"data": {"languages": "python"}}})
}
