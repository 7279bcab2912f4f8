//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalColumns is the width of the terminal w writes to; 0 when w is
// not a terminal.
func terminalColumns(w any) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
