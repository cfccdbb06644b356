package dist

import (
	"math"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

func TestSingle(t *testing.T) {
	be := cpu.New(1)
	c := NewSingle(be)
	buf := be.Alloc(5)
	be.Upload(buf, []float32{1, 2, 3, 4, 5})
	got := func() []float32 { out := make([]float32, 5); be.Download(out, buf); return out }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.AllReduce(buf, 1))
	must(c.AllGather(buf))
	must(c.Broadcast(buf, 0))
	must(c.Barrier())
	if g := got(); g[0] != 1 || g[4] != 5 {
		t.Fatalf("a sum over one rank changed the buffer: %v", g)
	}
	must(c.AllReduce(buf, 0.5))
	must(c.ReduceScatter(buf, 2))
	if g := got(); g[1] != 2 || g[4] != 5 {
		t.Fatalf("scale 0.5 then 2: %v", g)
	}
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatal("rank 0 of 1")
	}
	if err := c.Broadcast(buf, 1); err == nil || !strings.Contains(err.Error(), "root 1 is not a rank (0..0)") {
		t.Fatalf("broadcast from rank 1: %v", err)
	}
	var code int
	exit = func(c int) { code = c }
	defer func() { exit = nil }()
	c.Abort(3)
	if code != 3 {
		t.Fatalf("Abort(3) exited with %d", code)
	}
	must(c.Close())
}

func TestCheckBufSharded(t *testing.T) {
	be := cpu.New(1)
	err := CheckBuf("reduce-scatter", be.Alloc(10), 3, true)
	if err == nil || !strings.Contains(err.Error(), "reduce-scatter: a buffer of 10 elements does not split into 3 equal shards; allocate dist.Padded(n, 3) = 12") {
		t.Fatalf("got %v", err)
	}
	if err := CheckBuf("reduce-scatter", be.Alloc(12), 3, true); err != nil {
		t.Fatal(err)
	}
	err = CheckBuf("all-reduce", be.AllocDType(12, backend.BF16), 3, false)
	if err == nil || !strings.Contains(err.Error(), "all-reduce: a bf16 buffer; collectives run on fp32 buffers only") {
		t.Fatalf("a bf16 buffer: got %v", err)
	}
}

// The sum is in rank order, in float32: with these values each association gives other bits.
func TestSumRanksOrder(t *testing.T) {
	a, b, c := float32(1), float32(1e-8), float32(-1)
	dst := make([]float32, 1)
	SumRanks(dst, []float32{a, b, c}, 1)
	if want := float32(float32(a+b) + c); dst[0] != want || want != 0 {
		t.Fatalf("got %g, want ((a+b)+c) = %g", dst[0], want)
	}
	SumRanks(dst, []float32{c, a, b}, 1)
	if dst[0] != 1e-8 {
		t.Fatalf("got %g, want ((c+a)+b) = 1e-8", dst[0])
	}
	SumRanks(dst, []float32{3, 4}, 0.5)
	if dst[0] != 3.5 || math.Signbit(float64(dst[0])) {
		t.Fatalf("(3+4)*0.5 = %g", dst[0])
	}
}
