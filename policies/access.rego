# Who may run at all: a known, enabled tenant with well-formed policy data, a
# subject with role executor, a supported language and mode.
package execgate.access

import data.execgate.platform

default tenant_id := ""

tenant_id := input.tenant.id

default tenant_data := null

tenant_data := input.tenant.data

default roles := []

roles := input.subject.roles

default language := ""

language := input.request.language

default mode := ""

mode := input.request.mode

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

violations contains reason if some reason in tenant_violations

violations contains "subject lacks role executor" if not "executor" in roles

violations contains sprintf("language %q is not supported", [language]) if {
	not language in platform.languages
}

violations contains sprintf("mode %q is not run or test", [mode]) if {
	not mode in platform.modes
}

# record_source asks the audit log to keep the submitted source.
default record_source := false

record_source if tenant_data.audit.record_source == true
