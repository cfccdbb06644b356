package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
)

// onArch is a backend that knows only its GPU's compute capability: enough for the decisions
// that depend on it, with no GPU.
func onArch(major, minor int) *Backend {
	return &Backend{g: &Device{Info: DeviceInfo{Major: major, Minor: minor}}}
}

// fp16 works from Volta on; bf16 needs Ampere (cuBLASLt's bf16 products), and below it the error
// is one line that names fp16. The default training format follows: bf16 from sm_80, else fp16.
func TestDTypeByComputeCapability(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		bf16         bool
		def          backend.DType
	}{{7, 0, false, backend.F16}, {7, 5, false, backend.F16}, {8, 0, true, backend.BF16}, {8, 6, true, backend.BF16}, {9, 0, true, backend.BF16}} {
		be := onArch(c.major, c.minor)
		for _, dt := range []backend.DType{backend.F32, backend.F16} {
			if err := be.CheckDType(dt); err != nil {
				t.Errorf("sm_%d%d %v: %v", c.major, c.minor, dt, err)
			}
		}
		err := be.CheckDType(backend.BF16)
		if c.bf16 != (err == nil) {
			t.Errorf("sm_%d%d bf16: %v", c.major, c.minor, err)
		}
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--precision fp16")) {
			t.Errorf("sm_%d%d: %q is not one line naming --precision fp16", c.major, c.minor, err)
		}
		if got := be.DefaultDType(); got != c.def {
			t.Errorf("sm_%d%d: default %v, want %v", c.major, c.minor, got, c.def)
		}
		if err := be.CheckDType(be.DefaultDType()); err != nil {
			t.Errorf("sm_%d%d refuses its own default: %v", c.major, c.minor, err)
		}
	}
	if onArch(9, 0).CheckDType(backend.I32) == nil {
		t.Error("int32 accepted as a float format")
	}
}

// Upload and Download convert on the host: packing rounds exactly as backend.RoundBF16 and
// RoundF16 do (special values, both formats' boundaries, fp16 subnormals, random bit patterns),
// and widening gives the rounded value back bit for bit; NaN stays NaN.
func TestPack16MatchesRounding(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.1, 65504, 65519.99, 65520, -65520, 1e30, -1e-30,
		0x1p-14, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26, 3.0e-8, -5.9e-8, 0x1.ffp-15, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.MaxFloat32, math.SmallestNonzeroFloat32, 0x1.fffffep127, 0x1.ff8p127, float32(math.NaN()), math.Float32frombits(0xff800001)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		vals = append(vals, math.Float32frombits(rng.Uint32()))
		vals = append(vals, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(60)-40))))
	}
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		got := make([]float32, len(vals))
		unpack16(dt, got, pack16(dt, vals))
		for i, x := range vals {
			want := dt.Round(x)
			if want != want {
				if got[i] == got[i] {
					t.Errorf("%v: NaN %08x came back as %v", dt, math.Float32bits(x), got[i])
				}
				continue
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%v: %v (%08x) packs to %v (%08x), want %v (%08x)", dt, x, math.Float32bits(x),
					got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
			}
		}
		// Every 16-bit pattern widens to a value that packs back to the same pattern.
		all := make([]uint16, 1<<16)
		for i := range all {
			all[i] = uint16(i)
		}
		wide := make([]float32, len(all))
		unpack16(dt, wide, all)
		back := pack16(dt, wide)
		for i, h := range all {
			if wide[i] != wide[i] {
				continue // NaN payloads become the quiet NaN
			}
			if back[i] != h {
				t.Fatalf("%v: pattern %04x widens to %v, which packs to %04x", dt, h, wide[i], back[i])
			}
		}
	}
}

// A 16-bit buffer is 2 bytes an element: views step by 2 bytes and keep the format.
func TestBuf16Layout(t *testing.T) {
	var be *Backend
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16, backend.I32} {
		b := &buf{ptr: 1 << 20, n: 100, dt: dt}
		v := be.View(be.View(b, 10, 50), 3, 7).(*buf)
		if want := uintptr(1<<20 + 13*dt.Bytes()); v.ptr != want || v.DType() != dt || v.n != 7 {
			t.Errorf("%v view: ptr %#x dtype %v n %d, want ptr %#x", dt, v.ptr, v.DType(), v.n, want)
		}
		if got := b.bytes(100); got != int64(100*dt.Bytes()) {
			t.Errorf("%v: 100 elements are %d bytes", dt, got)
		}
	}
}

// Words shows a 16-bit buffer's bytes as float32 words (an all-gather of the bf16 copy over NCCL
// moves them): half as many, at the same address, so that W equal shards of the buffer are W
// equal shards of the words; an fp32 buffer is itself, an odd 16-bit length is refused.
func TestWords(t *testing.T) {
	var be *Backend
	for _, dt := range []backend.DType{backend.BF16, backend.F16, backend.F32} {
		b := &buf{ptr: 1 << 20, n: 4096 * 3, dt: dt}
		w := be.Words(b).(*buf)
		if w.ptr != b.ptr || w.DType() != backend.F32 || w.n != 4096*3*dt.Bytes()/4 || w.root != b {
			t.Errorf("%v: words ptr %#x n %d dtype %v", dt, w.ptr, w.n, w.DType())
		}
		shard := be.View(w, 2*w.n/3, w.n/3).(*buf) // rank 2 of 3
		if want := be.View(b, 2*4096, 4096).(*buf).ptr; shard.ptr != want {
			t.Errorf("%v: rank 2's words start at %#x, its elements at %#x", dt, shard.ptr, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Words of 3 bf16 values did not panic")
		}
	}()
	be.Words(&buf{ptr: 1 << 20, n: 3, dt: backend.BF16})
}

// Kernel names: fp32 kernels keep their names, 16-bit ones are suffixed by format, and kernels over
// activations and gradients by both; every variant of every op is in the lookup list.
func TestKernelVariantNames(t *testing.T) {
	if formatSuffix(backend.F32) != "" || formatSuffix(backend.BF16) != "_bf16" || formatSuffix(backend.F16) != "_fp16" {
		t.Error("formatSuffix")
	}
	if pairSuffix(backend.F32, backend.F32) != "" || pairSuffix(backend.BF16, backend.F32) != "_bf16_fp32" || pairSuffix(backend.F16, backend.F16) != "_fp16_fp16" {
		t.Error("pairSuffix")
	}
	have := map[string]bool{}
	for _, names := range kernelNames {
		for _, n := range names {
			if have[n] {
				t.Errorf("kernel %s listed twice", n)
			}
			have[n] = true
		}
	}
	for _, n := range []string{"gelu_forward", "gelu_forward_bf16", "adamw_fp16", "attention_backward_dkv_mm64_bf16",
		"attention_forward_hs32_fp16", "encoder_backward_wte_index_bf16_fp32", "layernorm_backward_reduce_fp16",
		"convert_bf16_fp32", "convert_fp32_fp16", "attention_forward_cached_bf16", "crossentropy_backward_fp16"} {
		if !have[n] {
			t.Errorf("kernel %s is not looked up", n)
		}
	}
}

// The GPU's memory plan counts bf16 and fp16 at their native 2 bytes: GPT-2 124M at B=16 T=1024
// plans 15.9 GiB in fp32 and 9.1 GiB in bf16, so only the 16-bit plans fit 12 GiB free.
func TestMemoryPlan16Bit(t *testing.T) {
	be := onArch(9, 0)
	if backend.ElementBytes(be, backend.BF16) != 2 || backend.ElementBytes(be, backend.F16) != 2 || backend.ElementBytes(be, backend.F32) != 4 {
		t.Fatal("the CUDA backend must count 16-bit elements as 2 bytes")
	}
	cfg, err := gpt.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	fp32 := gpt.PlanBytes(cfg.MemoryPlan(16, 1024))
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		plan := cfg.PrecisionMemoryPlan(16, 1024, gpt.Precision{Compute: dt})
		bytes := gpt.PlanBytes(plan)
		t.Logf("%v: %.2f GiB (fp32 %.2f GiB)", dt, float64(bytes)/(1<<30), float64(fp32)/(1<<30))
		if bytes > fp32*6/10 {
			t.Errorf("%v plan %d bytes is not much below fp32's %d", dt, bytes, fp32)
		}
		if err := checkPlan(plan, 12<<30, 16<<30, nil); err != nil {
			t.Errorf("%v: 124M B=16 T=1024 should fit 12 GiB free: %v", dt, err)
		}
	}
	if err := checkPlan(cfg.MemoryPlan(16, 1024), 12<<30, 16<<30, nil); err == nil {
		t.Error("fp32 124M B=16 T=1024 should not fit 12 GiB free")
	}
}
