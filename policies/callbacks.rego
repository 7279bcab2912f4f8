# Webhook callbacks: where the callback_url of an async execution (POST
# /v1/executions) may point. The tenant's data lists the hosts as
# host[:port] patterns in the egress grammar (egress.rego): a name,
# "*.domain" (any name below domain) or "*", with an optional port (1-65535
# or "*"; absent = any port):
#
#     callbacks: ["hooks.example.com:443", "*.example.org"]
#
# None by default: a tenant without the key has no callbacks. The gateway
# asks data.execgate.main.callback at submit with input.callback =
# {url, scheme, host, port} (parsed and canonicalised: host lower-case,
# port explicit); the callback is then sent through the egress address
# rules (no private ranges unless the platform opened them).
package execgate.callbacks

import data.execgate.egress

# patterns are the tenant's well-formed entries as [host, port] pairs.
patterns := [split(concat("", [q, ":*"]), ":") |
	some p in input.tenant.data.callbacks
	is_string(p)
	q := lower(p)
	egress.valid(q)
]

port_ok(p) if p == "*"

port_ok(p) if p == format_int(input.callback.port, 10)

allowed if {
	some pat in patterns
	egress.covers(pat[0], input.callback.host)
	port_ok(pat[1])
}

violations contains sprintf("callback host %s:%d is not in the tenant's callbacks allow-list", [input.callback.host, input.callback.port]) if {
	not allowed
}

violations contains sprintf("callback scheme %q is not http or https", [input.callback.scheme]) if {
	not input.callback.scheme in {"http", "https"}
}

violations contains sprintf("tenant %q is disabled", [input.tenant.id]) if {
	input.tenant.data.disabled == true
}
