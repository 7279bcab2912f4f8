# Brokered secrets (DESIGN §15, issue #24): credentials a tool may use but
# its caller may not see. The tenant's config holds where each one comes
# from (tenants[].secrets: NAME → a file or variable of the gateway); its
# policy data says which names its runs may get:
#
#     tenants:
#       - id: acme
#         policy:
#           secrets: [WEATHER_API_KEY]
#         secrets:
#           WEATHER_API_KEY: { file: /run/secrets/acme-weather }
#
# A run gets the secrets it asks for ("secrets": ["WEATHER_API_KEY"]) when
# the tenant's list grants every one of them; asking for one it does not
# grant denies the run, naming it. A run that asks for none gets none (a
# secret reaches tool code only when its caller asked for it). Test mode
# gets none: its secrets are the request's fixtures, never real ones.
# decision.secrets lists the names granted, never a value.
#
# Security teams narrow this with their own rules in package execgate.main,
# e.g. no secrets with network_access host:
#
#     deny contains "secrets are not granted with network host" if {
#         count(input.request.secrets) > 0
#         input.request.network_access == "host"
#     }
package execgate.secrets

import data.execgate.access

# tenant_secrets are the names the tenant's policy data grants.
tenant_secrets := {s | some s in access.tenant_data.secrets; is_string(s)} if is_array(access.tenant_data.secrets)

else := set()

# requested are the names the request asks for.
requested := {s | some s in input.request.secrets; is_string(s)}

# granted is the decided list (sorted): the requested names (a denied
# decision grants none), none in test mode.
granted := [] if {
	input.request.mode == "test"
} else := sort(requested)

violations contains sprintf("secret %q is not granted to tenant %q", [s, access.tenant_id]) if {
	not input.request.mode == "test"
	some s in requested
	not s in tenant_secrets
}
