package backend

import "math"

// QuantizeRowInt8 is the symmetric int8 quantization every backend's QuantizeInt8 and
// MatmulForwardInt8 use, so they agree to the bit: it writes q[i] = round(x[i] * (127/max|x|))
// for i < len(x), the product rounded to float32 and then to the nearest integer (ties to even),
// clamped to [-127, 127], and returns the scale max|x|/127 (float32 division) that takes q back
// to x. An all-zero row gets q = 0 and scale 0. q must hold len(x) values.
func QuantizeRowInt8(q []int8, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	if amax == 0 {
		clear(q[:len(x)])
		return 0
	}
	inv := 127 / amax
	for i, v := range x {
		r := math.RoundToEven(float64(float32(v * inv)))
		q[i] = int8(max(-127, min(127, r)))
	}
	return amax / 127
}
