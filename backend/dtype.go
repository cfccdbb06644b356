package backend

import (
	"fmt"
	"math"
)

// DType is the format a buffer stores its elements in. Every op reads its inputs as float32 and
// accumulates in float32 (or wider); it rounds each output element to its buffer's DType once,
// when it stores it, with round-to-nearest-even. That is exactly what a GPU kernel does that loads
// bf16, computes in fp32 registers and stores bf16, so a backend that only emulates a format
// (the CPU keeps float32 arrays holding values that are exactly representable in it) predicts a
// native one to within the order of the float32 sums.
type DType uint8

const (
	F32  DType = iota // IEEE binary32
	BF16              // bfloat16: float32's 8-bit exponent, 7 stored mantissa bits
	F16               // IEEE binary16: 5-bit exponent (max 65504, subnormals from 2^-24), 10 mantissa bits
	I32               // int32 (tokens and targets)
	I8                // int8 with one float32 scale per row (a quantized matmul weight, QuantizeInt8)
)

// String is the name used on the command line and in run.json: fp32, bf16, fp16, int32.
func (d DType) String() string {
	switch d {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	case F16:
		return "fp16"
	case I32:
		return "int32"
	case I8:
		return "int8"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Bytes is the size of one element stored natively in d (2 for the 16-bit formats, 1 for int8,
// whose per-row scales are not counted).
func (d DType) Bytes() int {
	switch d {
	case BF16, F16:
		return 2
	case I8:
		return 1
	}
	return 4
}

// Is16 says whether d is one of the 16-bit float formats.
func (d DType) Is16() bool { return d == BF16 || d == F16 }

// Epsilon is the unit roundoff of d: one round-to-nearest-even to d changes a value in d's normal
// range by at most this fraction of it, 2^-p for a format with p significant bits (the stored
// mantissa bits plus the implicit one): 2^-8 for bf16, 2^-11 for fp16, 2^-24 for fp32.
func (d DType) Epsilon() float64 {
	switch d {
	case BF16:
		return 0x1p-8
	case F16:
		return 0x1p-11
	}
	return 0x1p-24
}

// Round returns x rounded to the nearest value representable in d (ties to even), as a float32;
// F32 (and I32) return x unchanged. See RoundBF16 and RoundF16.
func (d DType) Round(x float32) float32 {
	switch d {
	case BF16:
		return RoundBF16(x)
	case F16:
		return RoundF16(x)
	}
	return x
}

// RoundBF16 rounds x to bfloat16 with round-to-nearest-even, as the hardware conversion
// (__float2bfloat16_rn, VCVTNEPS2BF16) does: NaN stays NaN (quiet), values beyond the largest
// finite bfloat16 become ±Inf, subnormals are rounded like any other value (bfloat16 has
// float32's exponent range).
func RoundBF16(x float32) float32 {
	if x != x {
		return float32(math.NaN())
	}
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1 // a carry out of the mantissa bumps the exponent, which is right
	return math.Float32frombits(b &^ 0xffff)
}

// f16 limits: the largest finite half, the smallest normal one, and the subnormal quantum.
const (
	f16Max       = 65504
	f16MinNormal = 0x1p-14
	// f16SubnormalShift is added to and subtracted from a value below f16MinNormal: in
	// [0.5, 1) float32's quantum is 2^-24, fp16's subnormal quantum, so the float32 addition
	// rounds to a multiple of 2^-24 with ties to even.
	f16SubnormalShift = 0.5
)

// RoundF16 rounds x to IEEE binary16 with round-to-nearest-even, as the hardware conversion
// (__float2half_rn, VCVTPS2PH with rounding mode 0) does: NaN stays NaN, magnitudes that round
// above 65504 become ±Inf (65520 and up), magnitudes below 2^-14 round to multiples of 2^-24
// (fp16's subnormals), and below 2^-25 to a signed zero.
func RoundF16(x float32) float32 {
	if x != x {
		return float32(math.NaN())
	}
	b := math.Float32bits(x)
	sign := b & 0x8000_0000
	mag := math.Float32frombits(b &^ 0x8000_0000)
	if mag < f16MinNormal {
		shifted := float32(mag + f16SubnormalShift) // rounds to the 2^-24 grid, ties to even
		mag = shifted - f16SubnormalShift           // exact
		return math.Float32frombits(math.Float32bits(mag) | sign)
	}
	m := b &^ 0x8000_0000
	m += 0xfff + (m>>13)&1 // keep 10 of float32's 23 mantissa bits, ties to even
	m &^= 0x1fff
	if math.Float32frombits(m) > f16Max {
		m = 0x7f80_0000 // +Inf (Inf itself passes through: its mantissa is 0)
	}
	return math.Float32frombits(m | sign)
}

// RoundStochastic rounds x to d stochastically: down or up to the two neighbouring values of d
// with probabilities that make the expected result x, decided by the 32 random bits r (use
// StochasticBits so that every backend draws the same bits for the same element). It is used
// when AdamW writes a 16-bit parameter copy, where round-to-nearest would drop updates smaller
// than half a unit in the last place. F32 returns x; NaN becomes the one NaN that rounding to
// nearest gives (a payload such as 0x7f800001 is no bf16 value: its top half reads as +Inf).
func RoundStochastic(d DType, x float32, r uint32) float32 {
	if d == F32 || d == I32 {
		return x
	}
	if x != x {
		return float32(math.NaN())
	}
	b := math.Float32bits(x)
	sign := b & 0x8000_0000
	m := b &^ 0x8000_0000
	if m >= 0x7f80_0000 { // ±Inf
		return x
	}
	switch d {
	case BF16:
		// The low 16 bits are the fraction of a bf16 unit: adding 16 random bits carries into
		// the kept bits with exactly that probability.
		m = (m + r>>16) &^ 0xffff
	case F16:
		mag := math.Float32frombits(m)
		if mag < f16MinNormal {
			v := float64(mag) * 0x1p24 // in units of 2^-24, exact
			f := math.Floor(v)
			if float64(r)*0x1p-32 < v-f {
				f++
			}
			return math.Float32frombits(math.Float32bits(float32(f*0x1p-24)) | sign)
		}
		m = (m + r>>19) &^ 0x1fff
		if math.Float32frombits(m) > f16Max {
			m = 0x7f80_0000
		}
	}
	return math.Float32frombits(m | sign)
}

// StochasticBits returns the 32 random bits that stochastic rounding uses for element i of a
// conversion seeded with seed: a SplitMix64 finaliser of seed + i*golden ratio, so the bits depend
// only on (seed, i), not on threads, blocks or the device.
func StochasticBits(seed uint64, i int) uint32 {
	z := seed + uint64(i)*0x9e37_79b9_7f4a_7c15
	z = (z ^ z>>30) * 0xbf58_476d_1ce4_e5b9
	z = (z ^ z>>27) * 0x94d0_49bb_1331_11eb
	z ^= z >> 31
	return uint32(z >> 32)
}

// StochasticSeedAt is the seed that rounds a slice starting at element off of a conversion seeded
// with seed exactly as that conversion does: StochasticBits(StochasticSeedAt(seed, off), i) is
// StochasticBits(seed, off+i). So a ZeRO-1 rank converts its shard alone to the bits the whole
// conversion gives. Seed 0 (round to nearest) stays 0.
func StochasticSeedAt(seed uint64, off int) uint64 {
	if seed == 0 {
		return 0
	}
	return seed + uint64(off)*0x9e37_79b9_7f4a_7c15
}

// WordViewer is implemented by backends that can show a buffer's memory as float32 words, so that
// a collective that copies values without reading them (an all-gather) can move a 16-bit buffer
// over a communicator of fp32 buffers (package dist), as PyTorch's tensor.view(dtype) does.
type WordViewer interface {
	// Words returns an fp32 buffer over b's memory, which writing it writes: on a GPU b's bytes
	// as float32 words (a 16-bit b must have an even length), on the CPU, whose 16-bit buffers
	// are float32 arrays, b's elements themselves. Either way, W equal shards of b are W equal
	// shards of its words.
	Words(b Buf) Buf
}

// ParseDType parses a storage format name: fp32, bf16 or fp16.
func ParseDType(s string) (DType, error) {
	switch s {
	case "fp32", "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "f16", "float16", "half":
		return F16, nil
	}
	return F32, fmt.Errorf("unknown format %q; use fp32, bf16 or fp16", s)
}

// ElementSizer is implemented by backends that store a format in other than its native size:
// the CPU emulates bf16 and fp16 in float32 arrays.
type ElementSizer interface {
	ElementBytes(dt DType) int
}

// ElementBytes is the number of bytes one element of dt takes on be: its ElementSizer's answer,
// looking through wrappers that have an Unwrap method (the profiler), else dt.Bytes().
func ElementBytes(be Backend, dt DType) int {
	for be != nil {
		if s, ok := be.(ElementSizer); ok {
			return s.ElementBytes(dt)
		}
		u, ok := be.(interface{ Unwrap() Backend })
		if !ok {
			break
		}
		be = u.Unwrap()
	}
	return dt.Bytes()
}
