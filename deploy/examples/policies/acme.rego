# Tenant-specific rules for tenant "acme", on top of the platform defaults.
# They can only add denials: the defaults' caps, allow-lists and deny-lists
# still apply.
package execgate.ext.acme

# free_memory_mb is the most memory a run on acme's free plan may request.
free_memory_mb := 512

is_acme if input.tenant.id == "acme"

# Reproducible builds: every requirement pins an exact version.
violations contains sprintf("acme: requirement %q must pin an exact version with ==", [r]) if {
	is_acme
	some r in input.request.requirements
	not contains(r, "==")
}

# Proxy runs name their destinations instead of relying on the allow-list.
violations contains "acme: proxy runs must name their egress hosts" if {
	is_acme
	input.request.network_access == "proxy"
	count(input.request.egress_hosts) == 0
}

violations contains sprintf("acme: free plan runs may request at most %d MiB of memory", [free_memory_mb]) if {
	is_acme
	input.tenant.plan == "free"
	input.request.limits.memory_mb > free_memory_mb
}

# No runs during acme's Sunday maintenance window, 02:00-04:00 UTC. The
# gateway's clock reaches the policy as time.now_ns().
violations contains "acme: runs are paused during the Sunday 02:00-04:00 UTC maintenance window" if {
	is_acme
	in_maintenance(time.now_ns())
}

in_maintenance(ns) if {
	time.weekday(ns) == "Sunday"
	[hour, _, _] := time.clock(ns)
	hour >= 2
	hour < 4
}
