package sandbox

// Config is the sandbox section of the execgate config file (DESIGN §13).
// Zero values mean "use the default" as documented per field.
type Config struct {
	// NsjailPath is the nsjail binary. Empty: $EXECGATE_NSJAIL, then the
	// project tools venv (.tools/venv/bin/nsjail next to the binary or the
	// working directory), then $PATH.
	NsjailPath string `yaml:"nsjail_path" json:"nsjail_path"`
	// PythonPath is the host interpreter the rootfs is built from.
	// Default /usr/bin/python3 (never a pyenv shim).
	PythonPath string `yaml:"python_path" json:"python_path"`
	// RootfsDir is the jail's root filesystem. Empty: <state_dir>/rootfs,
	// built on first use.
	RootfsDir string `yaml:"rootfs_dir" json:"rootfs_dir"`
	// WorkDir holds per-run scratch (request files, cgroup names). Empty:
	// <state_dir>/runs.
	WorkDir string `yaml:"work_dir" json:"work_dir"`
	// Cgroups selects the cgroup version: "auto" (default: detect), "v1", "v2".
	Cgroups string `yaml:"cgroups" json:"cgroups"`
	// WarmPool is the number of pre-spawned jails per profile. 0 disables the pool.
	WarmPool int `yaml:"warm_pool" json:"warm_pool"`
	// KillGraceMS is added to the timeout for nsjail's own time_limit and the
	// Go-side deadline kill. Default 1000.
	KillGraceMS int64 `yaml:"kill_grace_ms" json:"kill_grace_ms"`
}
