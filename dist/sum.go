package dist

// SumRanks writes dst[i] = scale * (((src0[i] + src1[i]) + src2[i]) + ...), where srcR =
// src[R*len(dst):(R+1)*len(dst)] is rank R's part: the float32 sum in rank order that the host
// communicators use, so that a sum over ranks gives the bits a sum over micro-batches in one
// process gives. scale 1 multiplies nothing.
func SumRanks(dst, src []float32, scale float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	if len(src)%n != 0 || len(src) == 0 {
		panic("dist.SumRanks: src is not a whole number of parts")
	}
	copy(dst, src[:n])
	for r := 1; r < len(src)/n; r++ {
		part := src[r*n : (r+1)*n]
		for i := range dst {
			dst[i] = float32(dst[i] + part[i])
		}
	}
	Scale(dst, scale)
}
