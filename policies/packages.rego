# Requirements: allowed only when every package is on the tenant's allow-list
# and on neither the platform's nor the tenant's deny-list. Names compare
# normalised (PEP 503: lower case, runs of "-", "_", "." become "-"); direct
# references (URLs, paths, "pkg @ url") and pip options are not requirements.
package execgate.packages

import data.execgate.access

import data.execgate.platform

default requirements := []

requirements := input.request.requirements

default tenant_packages := {}

tenant_packages := input.tenant.data.packages

name_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?`

spec_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]*\])?\s*((===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$`

valid(r) if {
	is_string(r)
	regex.match(spec_re, r)
}

normalize(n) := regex.replace(lower(n), `[-_.]+`, "-")

names_of(list) := {normalize(p) | some p in list; is_string(p)}

tenant_allow := names_of(object.get(tenant_packages, "allow", []))

tenant_deny := names_of(object.get(tenant_packages, "deny", []))

# names are the normalised package names of the valid requirements.
names := {normalize(regex.find_n(name_re, r, 1)[0]) | some r in requirements; valid(r)}

violations contains sprintf("requirement %q is not a valid requirement (name[extras] [op version])", [r]) if {
	some r in requirements
	not valid(r)
}

violations contains sprintf("package %q is on the platform deny-list", [n]) if {
	some n in names
	n in platform.package_deny
}

violations contains sprintf("package %q is on tenant %q's deny-list", [n, access.tenant_id]) if {
	some n in names
	n in tenant_deny
}

violations contains sprintf("package %q is not in tenant %q's allow-list", [n, access.tenant_id]) if {
	some n in names
	not n in tenant_allow
}

# allowed reports whether the requirements may be installed.
default allowed := false

allowed if count(violations) == 0
