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

resolved := {
	"tenant": {"id": "t1", "data": {"packages": {"allow": ["requests", "urllib3", "idna", "six"], "deny": ["urllib3==1.26.0"]}}},
	"request": {"requirements": ["requests>=2"], "packages": [
		{"name": "requests", "version": "2.31.0", "index": "https://pypi.org/simple", "via": ["requests"]},
		{"name": "urllib3", "version": "2.0.4", "index": "https://pypi.org/simple", "via": ["requests", "urllib3"]},
		{"name": "idna", "version": "3.4", "index": "https://pypi.org/simple", "via": ["requests", "idna"]},
	]},
}

with_packages(ps) := object.union(resolved, {"request": {"packages": ps}})

test_a_resolved_set_within_the_allow_list_is_allowed if {
	packages.allowed with input as resolved
	count(packages.violations) == 0 with input as resolved
}

test_a_transitive_package_off_the_allow_list_is_denied_naming_its_chain if {
	inp := with_packages(array.concat(resolved.request.packages, [{"name": "Charset_Normalizer", "version": "3.2.0", "index": "https://pypi.org/simple", "via": ["requests", "charset-normalizer"]}]))
	not packages.allowed with input as inp
	packages.violations == {`package "charset-normalizer==3.2.0" (requests → charset-normalizer) is not in tenant "t1"'s allow-list`} with input as inp
}

test_a_denied_version_is_denied_and_others_are_not if {
	bad := with_packages([{"name": "urllib3", "version": "1.26.0", "index": "", "via": ["requests", "urllib3"]}])
	packages.violations == {`package "urllib3==1.26.0" (requests → urllib3) is on tenant "t1"'s deny-list`} with input as bad
	good := with_packages([{"name": "urllib3", "version": "1.26.1", "index": "", "via": ["requests", "urllib3"]}])
	packages.allowed with input as good
}

test_a_platform_denied_transitive_package_is_denied if {
	inp := with_packages([{"name": "pip", "version": "24.0", "index": "", "via": ["six", "pip"]}])
	`package "pip==24.0" (six → pip) is on the platform deny-list` in packages.violations with input as inp
}

test_a_name_denied_transitive_package_is_denied if {
	inp := object.union(with_packages([{"name": "idna", "version": "3.4", "index": "", "via": ["requests", "idna"]}]), {"tenant": {"data": {"packages": {"deny": ["idna"]}}}})
	`package "idna==3.4" (requests → idna) is on tenant "t1"'s deny-list` in packages.violations with input as inp
}

test_tenant_indexes_restrict_where_packages_come_from if {
	inp := object.union(resolved, {"tenant": {"data": {"packages": {"indexes": ["https://mirror.internal/simple/"]}}}})
	v := packages.violations with input as inp
	count(v) == 3
	`package "idna==3.4" (requests → idna) comes from index "https://pypi.org/simple", not one of tenant "t1"'s indexes` in v
	ok := object.union(resolved, {"tenant": {"data": {"packages": {"indexes": ["https://pypi.org/simple"]}}}})
	packages.allowed with input as ok
}

test_a_package_without_chain_is_named_alone if {
	inp := with_packages([{"name": "numpy", "version": "2.0.0", "index": "", "via": []}])
	`package "numpy==2.0.0" (numpy) is not in tenant "t1"'s allow-list` in packages.violations with input as inp
}

test_a_requested_package_off_the_allow_list_is_reported_once if {
	inp := object.union(resolved, {"request": {"requirements": ["NumPy>=2"], "packages": [{"name": "numpy", "version": "2.0.0", "index": "", "via": ["numpy"]}]}})
	packages.violations == {`package "numpy" is not in tenant "t1"'s allow-list`} with input as inp
}
