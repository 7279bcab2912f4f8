package workspace

import "os"

// ClonesAttached is Clones by way of cloneAttached, the path of kernels
// before 6.15, whatever this kernel is.
func (w *Workspace) ClonesAttached() (ro, out *os.File, err error) { return w.clones(true) }
