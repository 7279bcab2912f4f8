//go:build !unix

package audit

import "os"

// lockFile is a no-op where flock does not exist; one gateway per audit
// file is then the operator's responsibility.
func lockFile(*os.File) error { return nil }
