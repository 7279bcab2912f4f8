package rootfs

import (
	"io/fs"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/harness"
)

// harnessVersion is what a rootfs must carry for this binary.
type harnessVersion struct {
	files    fs.FS
	sha256   string
	protocol int
}

// currentHarness returns the embedded harness and protocol of this binary.
func currentHarness() harnessVersion {
	return harnessVersion{files: harness.FS, sha256: harness.Hash(), protocol: jaillayout.ProtocolVersion}
}
