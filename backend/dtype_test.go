package backend

import (
	"math"
	"math/rand/v2"
	"testing"
)

// roundRef rounds x to a binary format with mant stored mantissa bits, smallest normal exponent
// minExp and largest finite value maxFinite, in float64 arithmetic: an independent statement of
// round-to-nearest-even to compare the bit tricks of RoundBF16 and RoundF16 with.
func roundRef(x float32, mant, minExp int, maxFinite float64) float32 {
	v := float64(x)
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return x
	}
	_, e := math.Frexp(math.Abs(v)) // |v| = f * 2^e with f in [0.5, 1)
	e--                             // |v| in [2^e, 2^(e+1))
	e = max(e, minExp)
	q := math.Ldexp(1, e-mant) // the quantum at this exponent (subnormals share minExp's)
	r := math.RoundToEven(v/q) * q
	if math.Abs(r) > maxFinite {
		return float32(math.Copysign(math.Inf(1), v))
	}
	return float32(r)
}

// bf16's largest finite value is (2 - 2^-7) * 2^127; anything that rounds above it overflows.
func refBF16Max() float64 { return (2 - 0x1p-7) * 0x1p127 }

func refF16(x float32) float32 { return roundRef(x, 10, -14, 65504) }

func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// Random bit patterns, every exponent, the values around each format's limits and halfway points:
// the bit tricks agree with the float64 reference bit for bit (signed zeros included).
func TestRoundMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var cases []float32
	for range 200000 {
		cases = append(cases, math.Float32frombits(rng.Uint32()))
	}
	for _, v := range []float64{0, 65504, 65519.99, 65520, 65536, 1e5, 0x1p-14, 0x1p-24, 0x1p-25, 0x1.8p-25,
		0x1p-26, 0x1.0p-15 + 0x1p-25, 1 + 0x1p-11, 1 + 0x1p-8, 1 + 3*0x1p-11, 1 + 3*0x1p-8, 6.1e-5,
		math.MaxFloat32, 0x1p-149, 0x1p-126, 3.3895e38, 3.39e38} {
		for _, s := range []float64{1, -1} {
			cases = append(cases, float32(s*v))
		}
	}
	for e := -150; e <= 128; e++ { // every exponent: the value, its halfway points, one ulp off
		base := math.Float32bits(float32(math.Ldexp(1, e)))
		for _, d := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000} {
			cases = append(cases, math.Float32frombits(base+d), math.Float32frombits((base+d)|0x8000_0000))
		}
	}
	for _, x := range cases {
		if got, want := RoundF16(x), refF16(x); !sameFloat(got, want) {
			t.Fatalf("RoundF16(%g = %#08x) = %g, want %g", x, math.Float32bits(x), got, want)
		}
		want := roundRef(x, 7, -126, refBF16Max())
		if math.IsInf(float64(x), 0) {
			want = x
		}
		if got := RoundBF16(x); !sameFloat(got, want) {
			t.Fatalf("RoundBF16(%g = %#08x) = %g, want %g", x, math.Float32bits(x), got, want)
		}
	}
}

// Every finite 16-bit value is a fixed point, and the format's named limits behave as IEEE says.
func TestRoundLimits(t *testing.T) {
	for h := range uint32(1 << 16) {
		bf := math.Float32frombits(h << 16)
		if !sameFloat(RoundBF16(bf), bf) {
			t.Fatalf("bf16 %#04x = %g is not a fixed point: %g", h, bf, RoundBF16(bf))
		}
	}
	for _, c := range []struct{ in, want float32 }{
		{65504, 65504}, {65519, 65504}, {65520, float32(math.Inf(1))}, {-70000, float32(math.Inf(-1))},
		{0x1p-24, 0x1p-24}, {0x1p-25, 0}, {0x1.000002p-25, 0x1p-24}, {0x1.8p-24, 0x1p-23},
		{-0x1p-26, float32(math.Copysign(0, -1))}, {1 + 0x1p-11, 1}, {1 + 0x1.002p-11, 1 + 0x1p-10},
	} {
		if got := RoundF16(c.in); !sameFloat(got, c.want) {
			t.Errorf("RoundF16(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := RoundBF16(1 + 0x1p-8); got != 1 {
		t.Errorf("RoundBF16(1+2^-8) = %g, want 1 (tie to even)", got)
	}
	if got := RoundBF16(1 + 3*0x1p-8); got != 1+4*0x1p-8 {
		t.Errorf("RoundBF16(1+3*2^-8) = %g, want 1+2^-6 (tie to even)", got)
	}
	if got := RoundBF16(math.MaxFloat32); !math.IsInf(float64(got), 1) {
		t.Errorf("RoundBF16(MaxFloat32) = %g, want +Inf", got)
	}
	for _, d := range []DType{BF16, F16} {
		if got := d.Round(float32(math.NaN())); got == got {
			t.Errorf("%v: NaN rounds to %g", d, got)
		}
	}
}

// Stochastic rounding lands on one of the two neighbours, is unbiased on average, and depends only
// on (seed, index).
func TestRoundStochastic(t *testing.T) {
	for _, d := range []DType{BF16, F16} {
		for _, x := range []float32{1 + 0x1p-12, -3.14159, 1e-6, 0x1.3p-20, 1000.3} {
			lo, hi := d.Round(x), d.Round(x)
			var sum float64
			const n = 20000
			for i := range n {
				y := RoundStochastic(d, x, StochasticBits(7, i))
				if d.Round(y) != y {
					t.Fatalf("%v: %g rounded stochastically to %g, which is not representable", d, x, y)
				}
				lo, hi = min(lo, y), max(hi, y)
				sum += float64(y)
			}
			quantum := float32(2 * d.Epsilon() * math.Abs(float64(x)))
			if d == F16 && math.Abs(float64(x)) < 0x1p-14 {
				quantum = 0x1p-24
			}
			if lo > x || hi < x || hi-lo > quantum {
				t.Errorf("%v: %g rounded into [%g, %g], wider than its two neighbours", d, x, lo, hi)
			}
			ulp := float64(hi - lo)
			if mean := sum / n; math.Abs(mean-float64(x)) > 4*ulp/math.Sqrt(n)+1e-12 {
				t.Errorf("%v: stochastic rounding of %g averages %g (neighbours %g, %g)", d, x, mean, lo, hi)
			}
		}
	}
	// NaN, whatever its payload, becomes round-to-nearest's NaN (the CUDA kernel writes it too).
	for _, d := range []DType{BF16, F16} {
		for _, bits := range []uint32{0x7f80_0001, 0xff80_0001, 0x7fbf_ffff, 0x7f81_2345, 0x7fc0_0000} {
			x := math.Float32frombits(bits)
			for i := range 4 {
				if got, want := RoundStochastic(d, x, StochasticBits(7, i)), d.Round(x); math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("%v: NaN %#08x rounded stochastically to %#08x, want %#08x", d, bits, math.Float32bits(got), math.Float32bits(want))
				}
			}
		}
	}
	if StochasticBits(1, 5) != StochasticBits(1, 5) || StochasticBits(1, 5) == StochasticBits(2, 5) || StochasticBits(1, 5) == StochasticBits(1, 6) {
		t.Error("StochasticBits must depend on the seed and the index, and only on them")
	}
}

// A conversion of the elements from off on, seeded with StochasticSeedAt(seed, off), draws the
// bits the whole conversion draws for them (a ZeRO-1 rank converting its shard); seed 0 (round to
// nearest) stays 0.
func TestStochasticSeedAt(t *testing.T) {
	for _, seed := range []uint64{1, 0x9e3779b97f4a7c15, 1<<64 - 1} {
		for _, off := range []int{0, 1, 4096, 1 << 40} {
			for _, i := range []int{0, 7, 1 << 20} {
				if got, want := StochasticBits(StochasticSeedAt(seed, off), i), StochasticBits(seed, off+i); got != want {
					t.Errorf("seed %#x off %d element %d: %#x, the whole conversion %#x", seed, off, i, got, want)
				}
			}
		}
	}
	if StochasticSeedAt(0, 4096) != 0 {
		t.Error("round to nearest must stay round to nearest")
	}
}

func BenchmarkRoundBF16(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i) * 1.0001
	}
	b.SetBytes(4 * int64(len(x)))
	for b.Loop() {
		for i, v := range x {
			x[i] = RoundBF16(v)
		}
	}
}

// TestStepStatsEncoding round-trips StepStats through GradStats' float32 layout, the norm's
// bits included (a NaN's too).
func TestStepStatsEncoding(t *testing.T) {
	for _, s := range []StepStats{
		{Norm: 1.2345678901234567, Scale: 0.5, Finite: true},
		{Norm: math.Float64frombits(0x7ff8_0000_dead_beef)},
		{Norm: math.Inf(1)},
		StepStatsOf(4, 1, 1), StepStatsOf(4, 0, 1024), StepStatsOf(math.NaN(), 1, 1),
	} {
		buf := make([]float32, StepStatsLen)
		s.Encode(buf)
		got := DecodeStepStats(buf)
		if math.Float64bits(got.Norm) != math.Float64bits(s.Norm) || got.Scale != s.Scale || got.Finite != s.Finite {
			t.Errorf("%+v came back as %+v", s, got)
		}
	}
	if s := StepStatsOf(4, 1, 1); s.Norm != 2 || s.Scale != float32(1/(2+1e-6)) || !s.Finite {
		t.Errorf("StepStatsOf(4, clip 1): %+v", s)
	}
	if s := StepStatsOf(16, 0, 4); s.Norm != 1 || s.Scale != 0.25 || !s.Finite {
		t.Errorf("StepStatsOf(16, no clip, loss scale 4): %+v", s)
	}
}

// TestSumBlockSums checks the grouping on sums where it shows: 1 followed by 127 values of
// 2^-53. Added in order, each 2^-53 rounds away (1 + 2^-53 is a tie, to even: 1); in groups of
// 64, the second group's 64 values add up exactly to 2^-47, which 1 keeps.
func TestSumBlockSums(t *testing.T) {
	x := make([]float64, 2*SumGroup)
	x[0] = 1
	for i := 1; i < len(x); i++ {
		x[i] = 0x1p-53
	}
	var inOrder float64
	for _, v := range x {
		inOrder += v
	}
	if want := 1 + 0x1p-47; SumBlockSums(x) != want || inOrder != 1 {
		t.Errorf("SumBlockSums = %v, want %v (in order: %v, want 1)", SumBlockSums(x), want, inOrder)
	}
	if SumBlockSums(nil) != 0 || SumBlockSums(x[:1]) != 1 {
		t.Error("SumBlockSums of nothing or of one value")
	}
}
