package execgate.callbacks_test

import data.execgate.callbacks
import data.execgate.main

cb(host, port) := {"url": sprintf("https://%s:%d/hook", [host, port]), "scheme": "https", "host": host, "port": port}

tenant(list) := {"id": "t1", "data": {"callbacks": list}}

test_no_callbacks_by_default if {
	d := main.callback with input as {"tenant": {"id": "t1", "data": {}}, "callback": cb("hooks.example.com", 443)}
	d.allow == false
	d.reasons == ["callback host hooks.example.com:443 is not in the tenant's callbacks allow-list"]
}

test_a_listed_host_is_allowed_on_any_port if {
	d := main.callback with input as {"tenant": tenant(["Hooks.Example.com"]), "callback": cb("hooks.example.com", 8443)}
	d == {"allow": true, "reasons": []}
}

test_a_listed_port_is_the_only_one if {
	inp := {"tenant": tenant(["hooks.example.com:443"]), "callback": cb("hooks.example.com", 443)}
	main.callback.allow with input as inp
	not main.callback.allow with input as object.union(inp, {"callback": cb("hooks.example.com", 444)})
}

test_a_wildcard_covers_names_below_its_domain_only if {
	t := tenant(["*.example.com"])
	main.callback.allow with input as {"tenant": t, "callback": cb("a.b.example.com", 443)}
	not main.callback.allow with input as {"tenant": t, "callback": cb("example.com", 443)}
	not main.callback.allow with input as {"tenant": t, "callback": cb("evil-example.com", 443)}
}

test_malformed_entries_grant_nothing if {
	not main.callback.allow with input as {"tenant": tenant(["hooks.example.com/path", 7]), "callback": cb("hooks.example.com", 443)}
}

test_another_scheme_is_denied if {
	inp := {"tenant": tenant(["*"]), "callback": object.union(cb("h.example", 443), {"scheme": "ftp"})}
	main.callback.reasons == [`callback scheme "ftp" is not http or https`] with input as inp
}

test_a_disabled_tenant_has_no_callbacks if {
	inp := {"tenant": {"id": "t1", "data": {"callbacks": ["*"], "disabled": true}}, "callback": cb("h.example", 443)}
	`tenant "t1" is disabled` in callbacks.violations with input as inp
	not main.callback.allow with input as inp
}
