package cpu

// matvecRowsAVX2 is matvecRows for n rows of k values (matvec_amd64.s).
//
//go:noescape
func matvecRowsAVX2(dst *float32, n int, x *float32, k int, rows *float32)

// matvecRowsAccelerated runs matvecRows on the assembly kernel if it applies and reports whether
// it did.
func matvecRowsAccelerated[F Float](dst, x, rows []F) bool {
	n, k := len(dst), len(x)
	if !vecKernelApplies[F](k) || n == 0 {
		return false
	}
	_ = rows[n*k-1]
	matvecRowsAVX2(&asFloat32(dst)[0], n, &asFloat32(x)[0], k, &asFloat32(rows)[0])
	return true
}
