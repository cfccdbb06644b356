package backend

import "math"

// Int8MaxC bounds an int8 product's row length C: its int32 dot products sum C products of at
// most 127*127 in magnitude.
const Int8MaxC = (1<<31 - 1) / (127 * 127)

// QuantizeRowInt8 is the symmetric int8 quantization every backend's QuantizeInt8 and
// MatmulForwardInt8 use, so they agree to the bit: it writes q[i] = round(x[i] * (127/max|x|))
// for i < len(x), the product rounded to float32 and then to the nearest integer (ties to even),
// clamped to [-127, 127], and returns the scale max|x|/127 (float32 division) that takes q back
// to x. q must hold len(x) values. The edge cases:
//   - an all-zero row gets q = 0 and scale 0;
//   - a row holding NaN or ±Inf gets q = 0 and scale NaN, so every product with it is NaN, as
//     the float product would be;
//   - a row whose max|x| is below 2^-64 is first multiplied by 2^64 (exact), so that 127/max
//     stays finite: the same q as the row's values at a normal size, and scale max|x|/127.
func QuantizeRowInt8(q []int8, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v)))) // max keeps a NaN
	}
	switch {
	case amax == 0 || !(amax <= math.MaxFloat32):
		clear(q[:len(x)])
		if amax == 0 {
			return 0
		}
		return float32(math.NaN())
	case amax < 0x1p-64:
		inv := 127 / (amax * 0x1p64)
		for i, v := range x {
			q[i] = roundInt8(v * 0x1p64 * inv)
		}
	default:
		inv := 127 / amax
		for i, v := range x {
			q[i] = roundInt8(v * inv)
		}
	}
	return amax / 127
}

// roundInt8 rounds p, a finite float32 product, to the nearest integer (ties to even) clamped to
// [-127, 127].
func roundInt8(p float32) int8 {
	r := math.RoundToEven(float64(p))
	return int8(max(-127, min(127, r)))
}
