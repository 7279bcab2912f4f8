package environments

// TreeSize is the size of the regular files below root.
var TreeSize = treeSize
