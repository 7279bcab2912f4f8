//go:build !linux

package sandbox

// RawCommand always fails off Linux.
func (r *Runner) RawCommand(Spec) ([]string, []byte, error) {
	return nil, nil, &UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}
