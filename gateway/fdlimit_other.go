//go:build !unix

package gateway

// fdLimit is unknown here: the connection total is bounded by
// server.max_conns_per_subject and max_unauthenticated_conns only.
func fdLimit() int { return 0 }
