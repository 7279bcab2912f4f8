# Platform baseline: the defaults, maxima and deny-lists every tenant runs
# under. Tenant policy data (input.tenant.data) can only narrow these; it can
# never raise a maximum or lift a platform deny.
#
# Limits (per run; a request asks for a value, 0 or absent means "not
# requested"):
#
#   key           default          maximum
#   timeout_ms    5000 (5 s)       60000 (60 s)     wall clock
#   cpu_ms        5000 (5 s)       60000 (60 s)     CPU time
#   memory_mb     256 MiB          2048 MiB         cgroup memory
#   pids          32               256              cgroup pids
#   output_bytes  1048576 (1 MiB)  16777216 (16 MiB) result/stdout/stderr cap
#   tmp_mb        64 MiB           1024 MiB         tmpfs /tmp size
#   files         32               1000             input files under /workspace
#   files_bytes   8388608 (8 MiB)  67108864 (64 MiB) their total size
#   artifacts     32               1000             files collected from /workspace/out
#   artifacts_bytes 8388608 (8 MiB) 67108864 (64 MiB) their total size
package execgate.platform

# limits_default applies to a limit the request did not set.
limits_default := {
	"timeout_ms": 5000,
	"cpu_ms": 5000,
	"memory_mb": 256,
	"pids": 32,
	"output_bytes": 1048576,
	"tmp_mb": 64,
	"files": 32,
	"files_bytes": 8388608,
	"artifacts": 32,
	"artifacts_bytes": 8388608,
}

# limits_max caps every limit, whatever the request or the tenant data say.
limits_max := {
	"timeout_ms": 60000,
	"cpu_ms": 60000,
	"memory_mb": 2048,
	"pids": 256,
	"output_bytes": 16777216,
	"tmp_mb": 1024,
	"files": 1000,
	"files_bytes": 67108864,
	"artifacts": 1000,
	"artifacts_bytes": 67108864,
}

# network_modes are the values network_access may take.
network_modes := {"none", "proxy", "host"}

# languages the sandbox can run (JavaScript and TypeScript under Deno).
languages := {"python", "javascript", "typescript"}

# isolation_levels a request may ask for (isolation.rego).
isolation_levels := {"jail", "process"}

# modes a request may ask for: run, or test (fixtures, no network, no tools).
modes := {"run", "test"}

# runtimes are the Python runtimes a run may name (runtimes.rego):
# python3.11 (Debian bookworm) and python3.13 (Debian trixie), built from
# pinned packages (rootfs/runtimes.lock.json), and host, the fallback
# copied from the host's interpreter. package limits repeats them
# (limits.Runtimes, limits.DefaultRuntime); a test fails when they drift.
runtimes := {"python3.11", "python3.13", "host"}

# runtime_default is the runtime of a tenant whose policy data lists none.
runtime_default := "python3.11"

# package_deny lists packages no tenant may install, whatever its allow-list
# says (names written normalised, as in PEP 503): installer tooling that could rewrite
# the environment, and abandoned crypto with known flaws.
package_deny := {
	"pip",
	"setuptools",
	"distribute",
	"virtualenv",
	"pyinstaller",
	"pycrypto",
}

# tenant_data_types is the shape of input.tenant.data (the tenant's policy
# block in the config file); a key of the wrong type denies every run so a
# config mistake is seen instead of silently ignored.
tenant_data_types := {
	"network": "array",
	"egress_allow": "array",
	"packages": "object",
	"max_limits": "object",
	"tools": "array",
	"disabled": "boolean",
	"audit": "object",
	"languages": "array",
	"isolation": "array",
	"runtimes": "array",
	"callbacks": "array",
	"secrets": "array",
}
