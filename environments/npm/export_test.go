package npm

import "context"

// SetBounds changes the metadata and tarball caps for one test.
func SetBounds(resolveBytes, packumentBytes, tarballBytes int64) (restore func()) {
	r, p, t := maxResolveBytes, maxPackumentBytes, maxTarballBytes
	maxResolveBytes, maxPackumentBytes, maxTarballBytes = resolveBytes, packumentBytes, tarballBytes
	return func() { maxResolveBytes, maxPackumentBytes, maxTarballBytes = r, p, t }
}

// SetCounts changes the packuments and dependency entries one resolution
// may look at, for one test.
func SetCounts(packuments, edges int) (restore func()) {
	p, e := maxPackuments, maxEdges
	maxPackuments, maxEdges = packuments, edges
	return func() { maxPackuments, maxEdges = p, e }
}

// FetchAndExtract is one package's install step: its tarball fetched and
// verified (from cache or reg), then, after between ran (which may remove
// the cached file), extracted into dst.
func FetchAndExtract(ctx context.Context, reg *Registry, p Package, cache, dst string, between func()) error {
	f, err := fetchVerified(ctx, reg, p, cache, dst, newBudget(Limits{}))
	if err != nil {
		return err
	}
	defer f.Close()
	between()
	return extract(f, dst, newBudget(Limits{}))
}
