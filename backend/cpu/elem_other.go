//go:build !amd64

package cpu

// Without assembly every elementwise kernel is its pure-Go version from elem.go.

func lseLanes(x []float32, m, s *[8]float32)               { lseLanesGo(x, m, s) }
func expShiftScale(dst, x []float32, shift, scale float32) { expShiftScaleGo(dst, x, shift, scale) }
func geluForward32(y, x []float32)                         { geluForwardGo(y, x) }
func geluBackward32(dx, x, dy []float32)                   { geluBackwardGo(dx, x, dy) }
func geluErfForward32(y, x []float32)                      { geluErfForwardGo(y, x) }
func geluErfBackward32(dx, x, dy []float32)                { geluErfBackwardGo(dx, x, dy) }
func adamWSpan(w, g, m, v []float32, k *adamWConsts)       { adamWGo(w, g, m, v, k) }
func sumSquaresLanes(x []float32, acc *[16]float64)        { sumSquaresGo(x, acc) }

func layernormRow32(y, x, weight, bias []float32) (mean, rstd float32) {
	return layernormRowGo(y, x, weight, bias)
}

func layernormBackwardRow32(dx, dy, x, weight []float32, m, s float32) {
	layernormBackwardRowGo(dx, dy, x, weight, m, s)
}

func layernormColumns32(dw, db, dy, x []float32, m, s float32) {
	layernormColumnsGo(dw, db, dy, x, m, s)
}

func add32(y, a, b []float32) {
	y, b = y[:len(a)], b[:len(a)]
	for i := range a {
		y[i] = a[i] + b[i]
	}
}
