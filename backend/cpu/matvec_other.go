//go:build !amd64

package cpu

// No assembly matrix-vector kernel on this architecture: matvecRows' loop runs it.
func matvecRowsAccelerated[F Float](dst, x, rows []F) bool { return false }
