// Package unixpair makes the socket pairs between the runner and a jail or
// a level-process run (the tool bridge, fd 5 of the jail's contract).
package unixpair

import (
	"net"
	"os"
	"syscall"
)

// Open returns the two ends of a unix stream socket (close-on-exec): the
// runner's, as a net.Conn, and the jail's, as a file to pass to it.
func Open() (net.Conn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	parent := os.NewFile(uintptr(fds[0]), "bridge")
	child := os.NewFile(uintptr(fds[1]), "bridge-jail")
	conn, err := net.FileConn(parent) // dups the descriptor
	parent.Close()
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	return conn, child, nil
}
