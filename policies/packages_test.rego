package execgate.packages_test

import data.execgate.packages

base := {
	"tenant": {"id": "t1", "data": {"packages": {"allow": ["six", "Typing_Extensions", "pip", "requests"], "deny": ["requests"]}}},
	"request": {"requirements": []},
}

with_reqs(r) := object.union(base, {"request": {"requirements": r}})

test_no_requirements_is_allowed if {
	packages.allowed with input as base
}

test_allow_listed_package_is_allowed if {
	inp := with_reqs(["six==1.16.0", "six", "six >= 1.0, < 2", "six[extra]==1"])
	packages.allowed with input as inp
	count(packages.violations) == 0 with input as inp
}

test_names_are_normalised if {
	packages.allowed with input as with_reqs(["typing-extensions==4.12.2", "TYPING.extensions"])
}

test_unlisted_package_is_denied if {
	inp := with_reqs(["numpy==2.0"])
	not packages.allowed with input as inp
	`package "numpy" is not in tenant "t1"'s allow-list` in packages.violations with input as inp
}

test_platform_deny_beats_tenant_allow if {
	inp := with_reqs(["pip==24.0"])
	not packages.allowed with input as inp
	`package "pip" is on the platform deny-list` in packages.violations with input as inp
}

test_tenant_deny_beats_tenant_allow if {
	`package "requests" is on tenant "t1"'s deny-list` in packages.violations with input as with_reqs(["requests"])
}

test_direct_references_are_denied if {
	inp := with_reqs(["six @ https://evil.test/six.whl", "git+https://x/y", "--index-url=https://x", "./local"])
	v := packages.violations with input as inp
	count(v) == 4
	`requirement "six @ https://evil.test/six.whl" is not a valid requirement (name[extras] [op version])` in v
}

test_missing_tenant_packages_denies_all if {
	inp := {"tenant": {"id": "t1", "data": {}}, "request": {"requirements": ["six"]}}
	not packages.allowed with input as inp
}

test_missing_requirements_are_none if {
	inp := object.remove(base, ["request"])
	packages.allowed with input as inp
	count(packages.violations) == 0 with input as inp
}
