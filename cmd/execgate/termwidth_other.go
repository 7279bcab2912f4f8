//go:build !unix

package main

// terminalColumns is 0: the terminal's width is not known here.
func terminalColumns(any) int { return 0 }
