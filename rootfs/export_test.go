package rootfs

// ExtraLibs is extraLibs for the external tests.
var ExtraLibs = extraLibs
