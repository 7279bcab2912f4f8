package environments

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/sandbox/harness"
)

// npmEnvKeyVersion changes whenever the recipe of an npm environment (its
// layout, what Install writes) changes, so old directories are never
// reused for a new recipe.
const npmEnvKeyVersion = "execgate-npm-env-v1"

// baseImportMap is the harness's import map, which every npm environment's
// import map extends: it is part of the environment's id, so a harness
// that blocks more gets environments that block as much.
var baseImportMap = sync.OnceValues(func() ([]byte, error) {
	return harness.FS.ReadFile(harness.ImportMap)
})

// NPMFromLock reads an npm lock (npm.ParseLock) into its environment;
// index is the registry the packages come from (for the policy). The
// error wraps ErrInvalidLock.
func NPMFromLock(lock, index string) (Environment, error) {
	pkgs, err := npm.ParseLock(lock)
	if err != nil {
		return Environment{}, fmt.Errorf("%w: %w", ErrInvalidLock, err)
	}
	return npmEnvironment(pkgs, index)
}

// npmEnvironment is the environment of a resolved or locked npm set.
func npmEnvironment(pkgs []npm.Package, index string) (Environment, error) {
	base, err := baseImportMap()
	if err != nil {
		return Environment{}, fmt.Errorf("reading the harness's import map: %w", err)
	}
	h := sha256.New()
	sum := sha256.Sum256(base)
	fmt.Fprintf(h, "%s\nimport_map=%x\n", npmEnvKeyVersion, sum)
	locked := make([]LockedPackage, len(pkgs))
	for i, p := range pkgs {
		fmt.Fprintf(h, "%s %s requested=%t\n", p.Key(), p.Integrity, p.Requested)
		locked[i] = LockedPackage{Name: p.Name, Version: p.Version, Index: index, Via: npm.Chain(pkgs, p)}
	}
	return Environment{ID: hex.EncodeToString(h.Sum(nil)), Lock: npm.RenderLock(pkgs), Packages: locked, Ecosystem: EcosystemNPM, npm: pkgs}, nil
}

// npmResolveKey names a resolution of reqs (sorted) against a registry for
// a platform.
func npmResolveKey(registry string, platform npm.Platform, reqs []npm.Requirement) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s-resolve\nregistry=%s\nplatform=%s-%s\n", npmEnvKeyVersion, registry, platform.OS, platform.CPU)
	for _, r := range reqs {
		fmt.Fprintf(h, "%s\n", r)
	}
	return hex.EncodeToString(h.Sum(nil))
}
