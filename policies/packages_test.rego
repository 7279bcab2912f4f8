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

# npm packages (JavaScript and TypeScript runs): the same lists, names with
# an "npm:" prefix, compared as they are.
npm_base := {
	"tenant": {"id": "t1", "data": {"packages": {
		"allow": ["npm:left-pad", "npm:@scope/util", "npm:lodash.merge", "npm:debug", "npm:ms", "six"],
		"deny": ["npm:ms@2.1.2"],
	}}},
	"request": {"language": "javascript", "requirements": ["left-pad@1.3.0"], "packages": [
		{"name": "npm:left-pad", "version": "1.3.0", "index": "https://registry.npmjs.org/", "via": ["left-pad"]},
	]},
}

npm_with(reqs, pkgs) := object.union(npm_base, {"request": {"requirements": reqs, "packages": pkgs}})

npm_pkg(name, version, via) := {"name": name, "version": version, "index": "https://registry.npmjs.org/", "via": via}

test_npm_allow_listed_packages_are_allowed if {
	packages.allowed with input as npm_base
	inp := npm_with(["@scope/util@2.0.0-rc.1", "debug@4.3.4"], [
		npm_pkg("npm:@scope/util", "2.0.0-rc.1", ["@scope/util"]),
		npm_pkg("npm:debug", "4.3.4", ["debug"]),
		npm_pkg("npm:ms", "2.1.3", ["debug", "ms"]),
	])
	packages.allowed with input as inp
	count(packages.violations) == 0 with input as inp
}

test_npm_names_are_not_pep503_normalised if {
	inp := npm_with(["lodash-merge@4.6.2"], [npm_pkg("npm:lodash-merge", "4.6.2", ["lodash-merge"])])
	not packages.allowed with input as inp
	`package "npm:lodash-merge" is not in tenant "t1"'s allow-list` in packages.violations with input as inp
}

test_npm_transitive_package_off_the_list_is_denied_naming_its_chain if {
	inp := npm_with(["debug@4.3.4"], [npm_pkg("npm:debug", "4.3.4", ["debug"]), npm_pkg("npm:supports-color", "9.4.0", ["debug", "supports-color"])])
	packages.violations == {`package "npm:supports-color@9.4.0" (debug → supports-color) is not in tenant "t1"'s allow-list`} with input as inp
}

test_npm_version_deny_denies_that_version_only if {
	denied := npm_with(["debug@4.3.4"], [npm_pkg("npm:debug", "4.3.4", ["debug"]), npm_pkg("npm:ms", "2.1.2", ["debug", "ms"])])
	packages.violations == {`package "npm:ms@2.1.2" (debug → ms) is on tenant "t1"'s deny-list`} with input as denied
	other := npm_with(["debug@4.3.4"], [npm_pkg("npm:debug", "4.3.4", ["debug"]), npm_pkg("npm:ms", "2.1.3", ["debug", "ms"])])
	packages.allowed with input as other
}

test_an_allowed_python_name_does_not_allow_the_npm_package if {
	inp := npm_with(["six@1.0.0"], [npm_pkg("npm:six", "1.0.0", ["six"])])
	`package "npm:six" is not in tenant "t1"'s allow-list` in packages.violations with input as inp
}

test_npm_requirements_must_be_exact if {
	inp := npm_with(["left-pad@^1.3.0", "left-pad", "git+https://x/y.git", "six==1.16.0"], [])
	v := packages.violations with input as inp
	`requirement "left-pad@^1.3.0" is not an npm package with an exact version (name@1.2.3)` in v
	`requirement "left-pad" is not an npm package with an exact version (name@1.2.3)` in v
	`requirement "six==1.16.0" is not an npm package with an exact version (name@1.2.3)` in v
	count(v) == 4
}

test_a_python_run_does_not_read_npm_requirements if {
	inp := object.union(npm_base, {"request": {"language": "python", "requirements": ["left-pad@1.3.0"], "packages": []}})
	`requirement "left-pad@1.3.0" is not a valid requirement (name[extras] [op version])` in packages.violations with input as inp
}
