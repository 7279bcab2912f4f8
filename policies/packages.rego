# Requirements: allowed only when every package is on the tenant's allow-list
# and on neither the platform's nor the tenant's deny-list. Names compare
# normalised (PEP 503: lower case, runs of "-", "_", "." become "-"); direct
# references (URLs, paths, "pkg @ url") and pip options are not requirements.
package execgate.packages

import data.execgate.access

import data.execgate.platform

default tenant_packages := {}

tenant_packages := input.tenant.data.packages

# A requirement is valid when it is a string matching spec_re:
# name[extras] [op version[, op version]...]; name_re matches its name.
name_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?`

spec_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]*\])?\s*((===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$`

normalize(n) := regex.replace(lower(n), `[-_.]+`, "-")

names_of(list) := {normalize(p) | some p in list; is_string(p)}

tenant_allow := names_of(object.get(tenant_packages, "allow", []))

tenant_deny := names_of(object.get(tenant_packages, "deny", []))

# names maps each valid requirement to its normalised package name. The
# rules below read the requirements from input directly (a request without
# them asks for none) and look names up only for requirements there are.
names := {r: normalize(regex.find_n(name_re, r, 1)[0]) |
	some r in input.request.requirements
	is_string(r)
	regex.match(spec_re, r)
}

# installable are the names a run may install: on the tenant's allow-list
# and on neither deny-list (depends on the tenant alone).
installable := (tenant_allow - tenant_deny) - platform.package_deny

# violations: a request without requirements (the common case), or whose
# requirements are all valid and installable, is recognised in one step;
# request_violations names what is wrong with any other.
violations := set() if {
	input.request.requirements == []
} else := set() if {
	every r in input.request.requirements {
		names[r] in installable
	}
} else := request_violations

request_violations contains sprintf("requirement %q is not a valid requirement (name[extras] [op version])", [r]) if {
	some r in input.request.requirements
	not names[r]
}

request_violations contains sprintf("package %q is on the platform deny-list", [n]) if {
	some r in input.request.requirements
	n := names[r]
	n in platform.package_deny
}

request_violations contains sprintf("package %q is on tenant %q's deny-list", [n, access.tenant_id]) if {
	some r in input.request.requirements
	n := names[r]
	n in tenant_deny
}

request_violations contains sprintf("package %q is not in tenant %q's allow-list", [n, access.tenant_id]) if {
	some r in input.request.requirements
	n := names[r]
	not n in tenant_allow
}

# allowed reports whether the requirements may be installed.
default allowed := false

allowed if count(violations) == 0
