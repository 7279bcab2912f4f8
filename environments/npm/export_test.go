package npm

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
