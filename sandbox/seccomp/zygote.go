package seccomp

// The zygote's policy (isolation level process, package zygote). A run's
// process is forked from a warm zygote and builds its own private /tmp,
// /workspace and IPC namespace before it denies itself the same calls with
// a filter of its own (execgate_zygote.py), so the zygote's policy lets
// exactly those calls through.

// Flags the zygote's seccomp policy lets through (and nothing else of
// unshare and mount): execgate_zygote.py uses exactly these.
const (
	zygoteUnshareFlags  = "0x18020000" // CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWIPC
	zygoteTmpfsFlags    = "14"         // MS_NOSUID|MS_NODEV|MS_NOEXEC
	zygoteRemountFlags  = "4143"       // MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC
	zygoteUnshareCond   = "(flags & 0xffffffff) != " + zygoteUnshareFlags
	zygoteMountCond     = "(flags & 0xffffffff) != " + zygoteTmpfsFlags + " && (flags & 0xffffffff) != " + zygoteRemountFlags
	zygoteKafelMountArg = "source, target, fstype, flags, data"
	// move_mount with MOVE_MOUNT_F_EMPTY_PATH only: a child moves the
	// detached clones of its workspace (package workspace) it was handed
	// to /workspace and /workspace/out.
	zygoteMoveMountFlags    = "4"
	zygoteMoveMountCond     = "(flags & 0xffffffff) != " + zygoteMoveMountFlags
	zygoteKafelMoveMountArg = "from_dfd, from_path, to_dfd, to_path, flags"
)

// ZygotePolicy is the policy of a level-process zygote: level jail's, with
// unshare, mount and move_mount killing except for the flags above, and
// prctl's PR_SET_DUMPABLE rule left out.
func ZygotePolicy() string {
	classes := make([]deniedSyscall, len(syscallClasses))
	copy(classes, syscallClasses)
	for i := 0; i < len(classes); i++ {
		switch classes[i].name {
		case "prctl":
			// A child is dumpable for its id maps to be written
			// (execgate_zygote.py), then denies itself this again.
			classes = append(classes[:i], classes[i+1:]...)
			i--
		case "unshare":
			classes[i].when = zygoteUnshareCond
		case "mount":
			classes[i].when = zygoteMountCond
		case "move_mount":
			classes[i].when = zygoteMoveMountCond
		}
	}
	args := map[string]string{"unshare": "flags", "mount": zygoteKafelMountArg, "move_mount": zygoteKafelMoveMountArg}
	for k, v := range kafelArgs {
		args[k] = v
	}
	return kafelPolicy(classes, args)
}
