# Who may run at all: a known, enabled tenant with well-formed policy data, a
# subject with role executor, a supported language and mode.
package execgate.access

import data.execgate.platform

default tenant_id := ""

tenant_id := input.tenant.id

default tenant_data := null

tenant_data := input.tenant.data

# A tenant is known when the gateway found it in the registry: it then has an
# id and a (possibly empty) policy data object.
default tenant_known := false

tenant_known if {
	is_string(tenant_id)
	tenant_id != ""
	is_object(tenant_data)
}

# tenant_violations depend on input.tenant alone, so the engine computes them
# once per tenant (policy.tenantOnlyRefs) instead of on every request.
tenant_violations contains "unknown tenant" if not tenant_known

tenant_violations contains sprintf("tenant %q is disabled", [tenant_id]) if {
	tenant_data.disabled == true
	tenant_known
}

tenant_violations contains msg if {
	tenant_known
	some key, want in platform.tenant_data_types
	value := tenant_data[key]
	type_name(value) != want
	msg := sprintf("tenant policy data %s must be %s, not %s", [key, want, type_name(value)])
}

# violations are the tenant's problems and the request's. A plain request
# (an executor asking for a supported language and mode, the common case) is
# recognised in one step; request_violations names what is wrong with any
# other. Rules on the request run on every decision, so each concern keeps
# the common case to one rule evaluation.
violations := tenant_violations if {
	"executor" in input.subject.roles
	input.request.language in platform.languages
	input.request.language in tenant_languages
	input.request.mode in platform.modes
} else := tenant_violations | request_violations

request_violations contains "subject lacks role executor" if not has_role("executor")

request_violations contains sprintf("language %q is not supported", [language]) if not language_supported

request_violations contains sprintf("language %q is not allowed for this tenant (its languages: %s)", [language, concat(", ", sort(tenant_languages))]) if {
	language_supported
	not language_allowed
}

request_violations contains sprintf("mode %q is not run or test", [mode]) if not mode_supported

# The checks above read input through helper rules, so that a missing field
# fails its check (a negated expression over a missing input field would
# not: OPA evaluates the field first) and is named "" in the reason. Each
# names its field: the decision memo keys on the input fields rules read,
# and a field read by a variable key would make it key on all of them.
has_role(role) if role in input.subject.roles

language_supported if input.request.language in platform.languages

language_allowed if input.request.language in tenant_languages

# tenant_languages are the languages a tenant may use: its policy data's
# "languages" (a list), or every language the platform runs (always
# defined: the else covers a tenant without the key, or without data).
tenant_languages := {l | some l in tenant_data.languages} if is_array(tenant_data.languages)

else := platform.languages

mode_supported if input.request.mode in platform.modes

default language := ""

language := input.request.language

default mode := ""

mode := input.request.mode

# record_source asks the audit log to keep the submitted source.
default record_source := false

record_source if tenant_data.audit.record_source == true
