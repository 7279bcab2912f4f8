package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/rootfs/jailverify"
)

func newRootfsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rootfs",
		Short: "Build, verify or show the jail's root filesystem",
	}
	cmd.AddCommand(newRootfsBuildCmd(), newRootfsVerifyCmd(), newRootfsShowCmd(), newRootfsLockCmd())
	return cmd
}

func newRootfsBuildCmd() *cobra.Command {
	var opts rootfs.Options
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build a runtime's rootfs (replaces an existing one atomically)",
		Long: `Build the jail's root filesystem of a runtime: python3.11 or python3.13 from the
Debian packages pinned in rootfs/runtimes.lock.json (fetched once into the .debs
cache beside it, each checked against its pinned SHA256, unpacked with dpkg-deb),
or host, copied from the host's interpreter (sandbox.python_path). The tree holds
the interpreter, its pruned standard library precompiled by that interpreter, its
shared-library closure, a CA trust store, tzdata, a minimal /etc, Deno and the
harness. Without --runtime it builds the first of sandbox.runtimes; without --out
into its place (<runtimes_dir>/<name>, or sandbox.rootfs_dir for host). Progress
goes to stderr, the manifest to stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if opts.Runtime == "" {
				opts.Runtime = cfg.Sandbox.WithDefaultRuntimes()[0]
			}
			if opts.Dir == "" {
				opts.Dir = cfg.Sandbox.RootfsOf(opts.Runtime)
			}
			if opts.PythonPath == "" {
				opts.PythonPath = cfg.Sandbox.PythonPath
			}
			if opts.DebianMirror == "" {
				opts.DebianMirror = cfg.Sandbox.DebianMirror
			}
			opts.Progress = cmd.ErrOrStderr()
			m, err := rootfs.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return printRootfsJSON(cmd, m)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "out", "", "rootfs directory (default: the runtime's place, <runtimes_dir>/<name>)")
	f.StringVar(&opts.Runtime, "runtime", "", "runtime to build: python3.11, python3.13 (pinned Debian packages) or host (the host's interpreter); default: the first of sandbox.runtimes")
	f.StringVar(&opts.PythonPath, "python", "", "host runtime: the host interpreter (default: sandbox.python_path, /usr/bin/python3)")
	f.StringVar(&opts.CABundle, "ca-bundle", "", "host runtime: PEM CA bundle to install (default: the host's, e.g. /etc/ssl/certs/ca-certificates.crt)")
	f.StringVar(&opts.CADir, "ca-dir", "", "host runtime: directory of OpenSSL hash-named certificates to install (default: /etc/ssl/certs with the default bundle)")
	return cmd
}

func newRootfsVerifyCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Verify a rootfs on the host and inside a real jail",
		Long: `Verify the rootfs at DIR (default: the first runtime's of sandbox.runtimes): manifest and content hash,
no setuid/setgid, writable or escaping entries, then one real jailed run that checks
the interpreter, the CA trust store, imports and the identity inside the jail.
Exits non-zero when a check fails.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, dir, err := rootfsDirArg(args)
			if err != nil {
				return err
			}
			rep, verr := rootfs.Verify(cmd.Context(), dir, jailverify.Opener(cfg.Sandbox))
			if rep == nil {
				return verr
			}
			if asJSON {
				if err := printRootfsJSON(cmd, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "rootfs %s\n", rep.Dir)
				rep.Print(cmd.OutOrStdout())
			}
			if verr != nil {
				if errors.Is(verr, rootfs.ErrVerify) {
					fmt.Fprintf(cmd.ErrOrStderr(), "execgate: rootfs %s: %d check(s) failed\n", rep.Dir, len(rep.Failed()))
					return exitError{code: 1}
				}
				return verr
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newRootfsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show [DIR]",
		Short: "Print a rootfs manifest",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, dir, err := rootfsDirArg(args)
			if err != nil {
				return err
			}
			m, err := rootfs.ReadManifest(dir)
			if err != nil {
				return err
			}
			return printRootfsJSON(cmd, m)
		},
	}
}

func printRootfsJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// rootfsDirArg loads the config and returns the rootfs directory: the
// optional DIR argument, else the first runtime's of sandbox.runtimes.
func rootfsDirArg(args []string) (*config.Config, string, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, "", err
	}
	if len(args) == 1 {
		return cfg, args[0], nil
	}
	return cfg, cfg.Sandbox.RootfsOf(cfg.Sandbox.WithDefaultRuntimes()[0]), nil
}

func newRootfsLockCmd() *cobra.Command {
	var (
		file  string
		names []string
		arch  string
	)
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Re-resolve the pinned Debian packages of the runtimes (rootfs/runtimes.lock.json)",
		Long: `Resolve the runtimes of the lock file against their Debian archives and pin the
result: each suite's InRelease is verified against the keyrings the lock names
(/usr/share/keyrings/debian-archive-*.gpg), each Packages index against the signed
Release, and the newest version of every package of the closure (roots plus
dependencies, minus the exclusions) is written with its SHA256. Run it from the
repository root and commit the file; builds then fetch exactly those packages:

  go run ./cmd/execgate rootfs lock [--runtime NAME]... [--arch amd64]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := rootfs.ReadLock(file)
			if err != nil {
				return err
			}
			out, err := rootfs.Relock(cmd.Context(), l, names, arch, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			data, err := out.Encode()
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", file)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "rootfs/runtimes.lock.json", "the lock file to update")
	f.StringSliceVar(&names, "runtime", nil, "runtimes to re-resolve (default: all of the lock)")
	f.StringVar(&arch, "arch", "", "Debian architecture (default: this machine's, amd64 or arm64)")
	return cmd
}
