package environments

// TreeSize is the size of the regular files below root.
var TreeSize = treeSize

// LockFile is lockFile: an exclusive flock on an install lock.
var LockFile = lockFile
