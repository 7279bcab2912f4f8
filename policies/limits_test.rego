package execgate.limits_test

import data.execgate.limits
import data.execgate.platform

base := {
	"tenant": {"id": "t1", "data": {"max_limits": {"timeout_ms": 30000, "memory_mb": 512}}},
	"request": {"limits": {}},
}

with_limits(l) := object.union(base, {"request": {"limits": l}})

test_unrequested_limits_get_platform_defaults if {
	limits.effective == platform.limits_default with input as base
}

test_defaults_apply_without_request_or_tenant_data if {
	limits.effective == platform.limits_default with input as {"tenant": {"id": "t1", "data": {}}}
}

test_requests_within_caps_are_kept if {
	inp := with_limits({"timeout_ms": 20000, "pids": 100})
	count(limits.violations) == 0 with input as inp
	e := limits.effective with input as inp
	e.timeout_ms == 20000
	e.pids == 100
}

test_requests_are_capped_by_tenant_max if {
	e := limits.effective with input as with_limits({"timeout_ms": 50000, "memory_mb": 4096})
	e.timeout_ms == 30000
	e.memory_mb == 512
}

test_requests_are_capped_by_platform_max if {
	e := limits.effective with input as with_limits({"cpu_ms": 999999, "output_bytes": 999999999, "tmp_mb": 99999})
	e.cpu_ms == 60000
	e.output_bytes == 16777216
	e.tmp_mb == 1024
}

test_tenant_max_above_platform_max_cannot_raise if {
	inp := object.union(base, {
		"tenant": {"data": {"max_limits": {"memory_mb": 100000}}},
		"request": {"limits": {"memory_mb": 100000}},
	})
	limits.effective.memory_mb == 2048 with input as inp
}

test_default_is_capped_by_a_lower_tenant_max if {
	inp := object.union(base, {"tenant": {"data": {"max_limits": {"memory_mb": 128}}}})
	limits.effective.memory_mb == 128 with input as inp
}

test_every_limit_key_is_decided if {
	e := limits.effective with input as with_limits({"timeout_ms": 1})
	object.keys(e) == object.keys(platform.limits_max)
}

test_negative_limit_is_denied if {
	"limits.memory_mb must be a non-negative integer" in limits.violations with input as with_limits({"memory_mb": -1})
}

test_fractional_limit_is_denied if {
	"limits.pids must be a non-negative integer" in limits.violations with input as with_limits({"pids": 1.5})
}

test_unknown_limit_is_denied if {
	"limits.gpus is not a known limit" in limits.violations with input as with_limits({"gpus": 1})
}

test_bad_tenant_max_is_denied if {
	inp := object.union(base, {"tenant": {"data": {"max_limits": {"pids": "lots"}}}})
	`tenant "t1" policy data max_limits.pids must be a positive number` in limits.violations with input as inp
}

test_zero_means_not_requested if {
	limits.effective.timeout_ms == 5000 with input as with_limits({"timeout_ms": 0})
}

test_limits_that_are_not_an_object_are_unknown if {
	v := limits.violations with input as object.union(base, {"request": {"limits": [5]}})
	count(v) == 1
	"limits.0 is not a known limit" in v
}

# The gateway sends every limit, 0 when not requested.
unrequested := {
	"timeout_ms": 0, "cpu_ms": 0, "memory_mb": 0, "pids": 0, "output_bytes": 0, "tmp_mb": 0,
	"files": 0, "files_bytes": 0, "artifacts": 0, "artifacts_bytes": 0,
}

test_gateway_request_without_limits_gets_capped_defaults if {
	inp := object.union(with_limits(unrequested), {"tenant": {"data": {"max_limits": {"memory_mb": 128}}}})
	limits.effective == object.union(platform.limits_default, {"memory_mb": 128}) with input as inp
	count(limits.violations) == 0 with input as inp
}

test_gateway_request_without_limits_keeps_tenant_violations if {
	inp := object.union(with_limits(unrequested), {"tenant": {"data": {"max_limits": {"pids": "lots"}}}})
	limits.violations == {`tenant "t1" policy data max_limits.pids must be a positive number`} with input as inp
}

test_gateway_request_with_one_limit_is_checked if {
	inp := with_limits(object.union(unrequested, {"pids": -1, "memory_mb": 4096}))
	limits.violations == {"limits.pids must be a non-negative integer"} with input as inp
	e := limits.effective with input as inp
	e.memory_mb == 512
	e.pids == 32
}

# Input files and artifacts are limits like the others: defaulted, capped
# by the tenant's maximum and the platform's.
test_files_and_artifacts_get_platform_defaults if {
	e := limits.effective with input as base
	e.files == 32
	e.files_bytes == 8388608
	e.artifacts == 32
	e.artifacts_bytes == 8388608
}

test_files_and_artifacts_are_capped_by_tenant_max if {
	inp := object.union(with_limits({"files": 500, "artifacts_bytes": 50000000}), {"tenant": {"data": {"max_limits": {"files": 10, "artifacts_bytes": 1048576}}}})
	e := limits.effective with input as inp
	e.files == 10
	e.artifacts_bytes == 1048576
	count(limits.violations) == 0 with input as inp
}

test_files_and_artifacts_are_capped_by_platform_max if {
	e := limits.effective with input as with_limits({"files": 100000, "files_bytes": 9999999999, "artifacts": 100000, "artifacts_bytes": 9999999999})
	e.files == 1000
	e.files_bytes == 67108864
	e.artifacts == 1000
	e.artifacts_bytes == 67108864
}

test_a_bad_tenant_max_files_is_denied if {
	v := limits.violations with input as object.union(base, {"tenant": {"data": {"max_limits": {"files": "many"}}}})
	"tenant \"t1\" policy data max_limits.files must be a positive number" in v
}
