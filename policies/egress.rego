# Egress allow-list: requested hosts ∩ the tenant's allow-list. Entries are
# host[:port] where host is a name, "*.domain" (any name below domain, not
# domain itself) or "*" (any host), and port is 1-65535 or "*" (absent = any
# port). The intersection keeps the narrower host and port, so a request for
# "api.example.com" against "*.example.com:443" yields "api.example.com:443".
# Only runs with network_access proxy get a non-empty list.
#
# A requested entry that no tenant pattern meets (no host overlap, or no
# port in common) denies the run with a reason naming it: the tool asked
# for that host and would only fail inside the jail if it were silently
# dropped. An entry that is met but narrowed (a wildcard or "any port"
# meeting a narrower pattern) is not a denial: the decision's egress.allow
# shows the narrowed entries.
package execgate.egress

import data.execgate.network

tenant_patterns := {lower(p) | some p in input.tenant.data.egress_allow; is_string(p)}

label := `[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?`

port := `([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]|\*)`

# entry_re is concat("", [`^(\*|(\*\.)?`, label, `(\.`, label, `)*)(:`, port, `)?$`])
# written out, so no evaluation rebuilds it (egress_test.rego checks the two
# agree).
entry_re := `^(\*|(\*\.)?[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*)(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]|\*))?$`

valid(s) if {
	is_string(s)
	regex.match(entry_re, s)
}

# Entries are parsed into [host, port] pairs, port "*" when absent:
# split("host[:port]:*", ":") has the host first and the port second.

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

# requested_entries maps each well-formed requested entry to its [host, port]
# pair (parsed once, for allowed and violations). A request without an
# egress_hosts list asks for none.
requested_entries := {r: split(concat("", [r, ":*"]), ":") |
	some r in input.request.egress_hosts
	is_string(r)
	regex.match(entry_re, r) # valid(r), written out: a call costs an evaluation per entry
}

pattern_entries := [split(concat("", [p, ":*"]), ":") | some p in tenant_patterns; valid(p)]

# pattern_ports maps each pattern host to its ports, and wildcard_ports the
# suffix a name must end in to match a wildcard pattern host ("*.domain":
# ".domain"; "*": "", as every name matches) to its ports (tenant-only, so
# computed once per tenant).
pattern_ports := {h: {p[1] | some p in pattern_entries; p[0] == h} | some pat in pattern_entries; h := pat[0]}

wildcard_ports := {substring(h, 1, -1): pattern_ports[h] | some h, _ in pattern_ports; startswith(h, "*")}

# A requested name without "*" is met by lookup: the patterns covering name
# n are n itself (pattern_ports), "*" and each "*.d" where n ends in ".d"
# (wildcard_ports; see covers); the meet's host is n.
allowed contains render(req[0], p) if {
	some req in requested_entries
	not contains(req[0], "*")
	some port in pattern_ports[req[0]]
	p := port_meet(req[1], port)
}

allowed contains render(req[0], p) if {
	some req in requested_entries
	not contains(req[0], "*")
	some suffix, ports in wildcard_ports
	endswith(req[0], suffix)
	some port in ports
	p := port_meet(req[1], port)
}

# A requested wildcard is met pattern by pattern.
allowed contains render(h, p) if {
	some req in requested_entries
	contains(req[0], "*")
	some pat in pattern_entries
	h := host_meet(req[0], pat[0])
	p := port_meet(req[1], pat[1])
}

# allow is the decided egress allow-list (sorted). The test on the request
# comes first: OPA's rule index evaluates it, so runs not asking for proxy
# skip the rule.
default allow := []

allow := sort(allowed) if {
	input.request.network_access == "proxy"
	network.mode == "proxy"
}

violations contains sprintf("egress host %q is not a valid host[:port] pattern", [r]) if {
	some r in input.request.egress_hosts
	not requested_entries[r]
}

# met(req): some tenant pattern meets the requested [host, port] pair (the
# same three cases as allowed).
met(req) if {
	not contains(req[0], "*")
	some port in pattern_ports[req[0]]
	_ := port_meet(req[1], port)
}

met(req) if {
	not contains(req[0], "*")
	some suffix, ports in wildcard_ports
	endswith(req[0], suffix)
	some port in ports
	_ := port_meet(req[1], port)
}

met(req) if {
	contains(req[0], "*")
	some pat in pattern_entries
	_ := host_meet(req[0], pat[0])
	_ := port_meet(req[1], pat[1])
}

violations contains sprintf("egress host %q is not in the tenant's egress allow-list", [r]) if {
	input.request.network_access == "proxy"
	network.mode == "proxy"
	some r, req in requested_entries
	not met(req)
}
