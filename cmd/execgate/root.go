package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/config"
)

// globalFlags are shared by every command (DESIGN §3, §13).
type globalFlags struct {
	configFile string
	stateDir   string
	listen     string
}

var flags globalFlags

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "execgate",
		Short:         "Policy-governed, multi-tenant code execution gateway (nsjail)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&flags.configFile, "config", "", "config file (YAML); default: the embedded default")
	pf.StringVar(&flags.stateDir, "state-dir", "", "state directory (rootfs, dev key, audit log)")
	pf.StringVar(&flags.listen, "listen", "", "listen address (overrides config)")
	root.AddCommand(
		newServeCmd(),
		newRunCmd(),
		newSmokeCmd(),
		newRootfsCmd(),
		newPolicyCmd(),
		newTokenCmd(),
		newDiagnoseCmd(),
		newBenchCmd(),
		newConfigCmd(),
		newAdminCmd(),
		newPrepareCmd(),
	)
	return root
}

// loadConfig loads --config (or the embedded default), EXECGATE_…
// overrides, then the --state-dir and --listen flags, then overrides (more
// EXECGATE_…=value pairs a command's own flags set). The flags are given to
// config.Load beside the environment, never set in it: the process's
// environment (and so every later command of the same process, as in the
// tests) stays as it was.
func loadConfig(overrides ...string) (*config.Config, error) {
	env := os.Environ()
	if flags.stateDir != "" {
		env = append(env, "EXECGATE_STATE_DIR="+flags.stateDir)
	}
	if flags.listen != "" {
		env = append(env, "EXECGATE_LISTEN="+flags.listen)
	}
	return config.Load(flags.configFile, append(env, overrides...))
}

// exitCoder is an error that carries the process exit code; its message has
// already been printed.
type exitCoder interface {
	error
	ExitCode() int
}

type exitError struct{ code int }

func (e exitError) Error() string { return "exit" }
func (e exitError) ExitCode() int { return e.code }

func asExitCoder(err error, target *exitCoder) bool { return errors.As(err, target) }
