package backend

import (
	"fmt"
	"math"
)

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

// QuantizeInt8Rows quantizes a weight w(OC,C) row by row (QuantizeRowInt8) for a backend's
// QuantizeInt8: rows of stride bytes, C rounded up to align, zero padded, and one scale per row.
// It refuses what CheckInt8Shape refuses.
func QuantizeInt8Rows(w []float32, OC, C, align int) (q []int8, scales []float32, stride int, err error) {
	if err := CheckInt8Shape(len(w), OC, C); err != nil {
		return nil, nil, 0, err
	}
	stride = (C + align - 1) / align * align
	q, scales = make([]int8, OC*stride), make([]float32, OC)
	for o := range OC {
		scales[o] = QuantizeRowInt8(q[o*stride:o*stride+C], w[o*C:(o+1)*C])
	}
	return q, scales, stride, nil
}

// CheckInt8Shape refuses a weight of n values as a (OC,C) int8 weight when it holds fewer than
// OC*C or its rows are longer than Int8MaxC.
func CheckInt8Shape(n, OC, C int) error {
	switch {
	case n < OC*C || OC <= 0 || C <= 0:
		return fmt.Errorf("quantize: weight of %d values for (%d,%d)", n, OC, C)
	case C > Int8MaxC:
		return fmt.Errorf("quantize: rows of %d values; int8 sums overflow beyond %d", C, Int8MaxC)
	}
	return nil
}
