# Requirements: allowed only when every package is on the tenant's allow-list
# and on neither the platform's nor the tenant's deny-list. Names compare
# normalised (PEP 503: lower case, runs of "-", "_", "." become "-"); direct
# references (URLs, paths, "pkg @ url") and pip options are not requirements.
#
# The gateway resolves the requirements (or reads a lock, or the lock of an
# environment id) to the complete locked set before asking, and passes it as
# input.request.packages: [{name, version, index, via}], transitive
# dependencies included. Every package of that set is checked, not only the
# requested ones:
#   - its name, against the allow- and deny-lists above;
#   - its version: a deny-list entry "name==version" denies that version only;
#   - its index: when the tenant's data has packages.indexes (a list of
#     index URLs), the package must come from one of them.
# A denial names the chain that pulled the package in, e.g.
# `package "urllib3==2.0.4" (requests → urllib3) is not in tenant "acme"'s allow-list`.
#
# npm packages (JavaScript and TypeScript runs) are checked by the same
# rules against the same lists, named with an "npm:" prefix: a tenant's
# packages.allow lists "npm:left-pad", "npm:@scope/name"; a deny-list
# entry "npm:left-pad@1.3.0" denies that version only. npm names are
# compared as they are (not PEP 503-normalised: "lodash.merge" and
# "lodash-merge" are different packages). A JavaScript or TypeScript run's
# requirements are npm packages with exact versions ("left-pad@1.3.0"),
# and input.request.packages names each resolved package "npm:<name>".
package execgate.packages

import data.execgate.access

import data.execgate.platform

default tenant_packages := {}

tenant_packages := input.tenant.data.packages

# A requirement is valid when it is a string matching spec_re:
# name[extras] [op version[, op version]...]; name_re matches its name.
name_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?`

spec_re := `^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]*\])?\s*((===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$`

# npm_spec_re is an npm requirement: a package name and an exact version.
npm_spec_re := `^(@[a-z0-9~-][a-z0-9._~-]*/)?[A-Za-z0-9~-][A-Za-z0-9._~-]*@(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`

# npm_request: the run's requirements are npm packages.
npm_request if input.request.language in {"javascript", "typescript"}

normalize(n) := n if startswith(n, "npm:")

else := regex.replace(lower(n), `[-_.]+`, "-")

# npm_split(s) is [name, version] of "name@version" (the last "@": a scope
# starts with one).
npm_split(s) := [substring(s, 0, i), substring(s, i + 1, -1)] if {
	i := max(indexof_n(s, "@"))
	i > 0
}

# npm_pinned(e): a deny-list entry "npm:name@version".
npm_pinned(e) if {
	startswith(e, "npm:")
	npm_split(substring(e, 4, -1))
}

names_of(list) := {normalize(p) | some p in list; is_string(p)}

tenant_allow := names_of(object.get(tenant_packages, "allow", []))

# Deny-list entries are names, or "name==version" for one version only.
deny_entries := [e | some e in object.get(tenant_packages, "deny", []); is_string(e)]

tenant_deny := {normalize(e) | some e in deny_entries; not contains(e, "=="); not npm_pinned(e)}

tenant_deny_versions := {sprintf("%s==%s", [normalize(trim_space(parts[0])), trim_space(parts[1])]) |
	some e in deny_entries
	contains(e, "==")
	parts := split(e, "==")
} | {e | some e in deny_entries; npm_pinned(e)}

# indexes, when the tenant lists any, are the only indexes packages may come from.
tenant_indexes := {trim_suffix(i, "/") | some i in object.get(tenant_packages, "indexes", []); is_string(i)}

# packages is the resolved set (read by its own path, so decisions stay
# keyed on the request fields they use).
default packages := []

packages := p if {
	p := input.request.packages
	is_array(p)
}

# names maps each valid requirement to its normalised package name. The
# rules below read the requirements from input directly (a request without
# them asks for none) and look names up only for requirements there are.
names := {r: normalize(regex.find_n(name_re, r, 1)[0]) |
	some r in input.request.requirements
	is_string(r)
	regex.match(spec_re, r)
} if not npm_request

names := {r: concat("", ["npm:", npm_split(r)[0]]) |
	some r in input.request.requirements
	is_string(r)
	regex.match(npm_spec_re, r)
} if npm_request

# installable are the names a run may install: on the tenant's allow-list
# and on neither deny-list (depends on the tenant alone).
installable := (tenant_allow - tenant_deny) - platform.package_deny

# violations: a request without requirements (the common case), or whose
# requirements are all valid and installable, is recognised in one step;
# request_violations names what is wrong with any other.
violations := set() if {
	input.request.requirements == []
	packages == []
} else := set() if {
	every r in input.request.requirements {
		names[r] in installable
	}
	every p in packages {
		package_ok(p)
	}
} else := request_violations

# package_ok(p): a resolved package the tenant may install.
package_ok(p) if {
	normalize(p.name) in installable
	not pin(p) in tenant_deny_versions
	index_ok(p)
}

index_ok(_) if count(tenant_indexes) == 0

index_ok(p) if trim_suffix(p.index, "/") in tenant_indexes

# chain renders how p was pulled in: "requests → urllib3" (the requested
# package alone when it was asked for directly).
chain(p) := concat(" → ", p.via) if count(p.via) > 0

else := normalize(p.name)

pin(p) := sprintf("%s@%s", [p.name, p.version]) if startswith(p.name, "npm:")

else := sprintf("%s==%s", [normalize(p.name), p.version])

# requested_names are the names the requirements ask for: their name-list
# denials are reported once, by the requirement rules below, not again for
# the resolved package.
requested_names := {n | some n in names}

transitive(p) if not normalize(p.name) in requested_names

request_violations contains sprintf("requirement %q is not a valid requirement (name[extras] [op version])", [r]) if {
	not npm_request
	some r in input.request.requirements
	not names[r]
}

request_violations contains sprintf("requirement %q is not an npm package with an exact version (name@1.2.3)", [r]) if {
	npm_request
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

request_violations contains sprintf("package %q (%s) is on the platform deny-list", [pin(p), chain(p)]) if {
	some p in packages
	normalize(p.name) in platform.package_deny
	transitive(p)
}

request_violations contains sprintf("package %q (%s) is on tenant %q's deny-list", [pin(p), chain(p), access.tenant_id]) if {
	some p in packages
	n := normalize(p.name)
	n in tenant_deny
	transitive(p)
}

request_violations contains sprintf("package %q (%s) is on tenant %q's deny-list", [pin(p), chain(p), access.tenant_id]) if {
	some p in packages
	pin(p) in tenant_deny_versions
}

request_violations contains sprintf("package %q (%s) is not in tenant %q's allow-list", [pin(p), chain(p), access.tenant_id]) if {
	some p in packages
	not normalize(p.name) in tenant_allow
	transitive(p)
}

request_violations contains sprintf("package %q (%s) comes from index %q, not one of tenant %q's indexes", [pin(p), chain(p), p.index, access.tenant_id]) if {
	some p in packages
	not index_ok(p)
}
