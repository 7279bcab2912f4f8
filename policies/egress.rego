# Egress allow-list: requested hosts ∩ the tenant's allow-list. Entries are
# host[:port] where host is a name, "*.domain" (any name below domain, not
# domain itself) or "*" (any host), and port is 1-65535 or "*" (absent = any
# port). The intersection keeps the narrower host and port, so a request for
# "api.example.com" against "*.example.com:443" yields "api.example.com:443".
# Only runs with network_access proxy get a non-empty list.
package execgate.egress

import data.execgate.network

default requested := []

requested := input.request.egress_hosts

tenant_patterns := {lower(p) | some p in input.tenant.data.egress_allow; is_string(p)}

label := `[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?`

port := `([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]|\*)`

entry_re := concat("", [`^(\*|(\*\.)?`, label, `(\.`, label, `)*)(:`, port, `)?$`])

valid(s) if {
	is_string(s)
	regex.match(entry_re, s)
}

# parse("host[:port]") is {"host": host, "port": port or "*"}.
parse(s) := {"host": p[0], "port": p[1]} if p := split(concat("", [s, ":*"]), ":")

# covers(p, h): every name host pattern h matches, pattern p matches too.
covers(p, h) if {
	p == "*"
} else if {
	p == h
} else if {
	startswith(p, "*.")
	h != "*"
	endswith(h, substring(p, 1, -1))
}

# host_meet(a, b) is the narrower of two overlapping host patterns.
host_meet(a, b) := a if covers(b, a)

else := b if covers(a, b)

port_meet(a, b) := a if b == "*"

else := b if a == "*"

else := a if a == b

render(h, p) := h if p == "*"

else := concat(":", [h, p])

requested_entries := [parse(r) | some r in requested; valid(r)]

pattern_entries := [parse(p) | some p in tenant_patterns; valid(p)]

allowed contains render(h, p) if {
	some req in requested_entries
	some pat in pattern_entries
	h := host_meet(req.host, pat.host)
	p := port_meet(req.port, pat.port)
}

# allow is the decided egress allow-list (sorted).
default allow := []

allow := sort(allowed) if network.mode == "proxy"

violations contains sprintf("egress host %q is not a valid host[:port] pattern", [r]) if {
	some r in requested
	not valid(r)
}
