package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
)

func TestTokenIndex(t *testing.T) {
	var x tokenIndex
	tokens := []int32{5, 2, 5, 0, 2, 5, 9}
	if !x.build(tokens) {
		t.Fatal("build refused valid tokens")
	}
	n, u := len(tokens), x.distinct
	if x.host[0] != int32(u) {
		t.Errorf("the index starts with %d groups, want %d", x.host[0], u)
	}
	order, start, token := x.host[1:n+1], x.host[n+1:n+u+2], x.host[n+u+2:]
	if want := []int32{3, 1, 4, 0, 2, 5, 6}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if want := []int32{0, 1, 3, 6, 7}; !slices.Equal(start, want) {
		t.Errorf("start %v, want %v", start, want)
	}
	if want := []int32{0, 2, 5, 9}; !slices.Equal(token, want) {
		t.Errorf("token %v, want %v", token, want)
	}
	// Reuse with a smaller batch, then refuse ids the table cannot hold.
	if !x.build([]int32{1, 1}) || x.distinct != 1 || !slices.Equal(x.host, []int32{1, 0, 1, 0, 2, 1}) {
		t.Errorf("rebuild: distinct %d host %v", x.distinct, x.host)
	}
	if x.build([]int32{3, -1}) || x.build([]int32{maxIndexedToken}) || x.n != 0 {
		t.Error("out-of-range ids must leave no index")
	}
	// Every token distinct: the index is at its largest, 3n+2.
	long := make([]int32, 5000)
	for i := range long {
		long[i] = int32(len(long) - i)
	}
	if !x.build(long) || x.distinct != len(long) || len(x.host) != 3*len(long)+2 || x.host[1] != int32(len(long)-1) {
		t.Errorf("all distinct: distinct %d, %d ints", x.distinct, len(x.host))
	}
	if allocs := testing.AllocsPerRun(10, func() { x.build(tokens) }); allocs != 0 {
		t.Errorf("rebuilding allocates %v times", allocs)
	}
}

// EncoderBackward gives the CPU's bits with the token index (a whole upload, or one into a view at
// the allocation's start), without it (a view inside the tokens), and after part of a whole upload was overwritten through a view, which must
// drop the index rather than leave a stale one.
func TestEncoderBackwardPaths(t *testing.T) {
	g := gpu(t, false)
	r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(5, 6))}
	const B, T, C, V = 4, 50, 200, 7 // few distinct tokens: long groups
	whole, other := r.tokens(B*T, V), r.tokens(B*T+3, V)
	if idx := whole.g.(*buf).idx; idx == nil || idx.n != B*T {
		t.Fatal("a whole upload of tokens built no index")
	}
	compare := func(name string, tk *pair, B, T, C, V int) {
		dout, dwte := r.rand(B*T*C, 1), r.rand(V*C, 1)
		r.cpu.EncoderBackward(dwte.c, nil, dout.c, tk.c, B, T, C)
		g.EncoderBackward(dwte.g, nil, dout.g, tk.g, B, T, C)
		want, got := make([]float32, V*C), make([]float32, V*C)
		r.cpu.Download(want, dwte.c)
		g.Download(got, dwte.g)
		if !slices.Equal(want, got) {
			t.Errorf("%s: dwte differs from the CPU's", name)
		}
	}
	check := func(name string, tk *pair) { compare(name, tk, B, T, C, V) }
	check("index", whole)
	check("view", &pair{c: r.cpu.View(other.c, 3, B*T), g: g.View(other.g, 3, B*T)})
	// An upload into a view at its allocation's start (the model's batch views) indexes the
	// allocation's first tokens, and the view uses that index.
	start := r.tokens(B*T+9, V)
	head := &pair{c: r.cpu.View(start.c, 0, B*T), g: g.View(start.g, 0, B*T)}
	ids := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32(r.rng.IntN(V))
	}
	r.cpu.UploadInt32(head.c, ids)
	g.UploadInt32(head.g, ids)
	if idx := start.g.(*buf).idx; idx == nil || idx.n != B*T {
		t.Fatal("an upload into a view at the allocation's start built no index")
	}
	check("view at the start", head)
	part := []int32{6, 6, 6, 0, 1, 2, 3, 4, 5, 6}
	r.cpu.UploadInt32(r.cpu.View(whole.c, 5, len(part)), part)
	g.UploadInt32(g.View(whole.g, 5, len(part)), part)
	if whole.g.(*buf).idx.n != 0 {
		t.Fatal("an upload through a view left the allocation's token index in place")
	}
	check("written through a view", whole)

	// More distinct tokens than the grid has groups (indexGroupsPerGrid): blocks take several.
	const B2, T2, C2, V2 = 8, 1024, 64, 50000
	many := r.tokens(B2*T2, V2)
	if idx := many.g.(*buf).idx; idx == nil || idx.distinct <= indexGroupsPerGrid {
		t.Fatalf("want more than %d distinct tokens in the index", indexGroupsPerGrid)
	}
	compare(fmt.Sprintf("%d distinct tokens", many.g.(*buf).idx.distinct), many, B2, T2, C2, V2)
}

// A view of a view still knows its allocation, so writing through it drops the allocation's index
// (what UploadInt32 into a view and Zero do).
func TestViewDropsAllocationsIndex(t *testing.T) {
	var be *Backend // View needs no device
	whole := &buf{ptr: 1 << 20, n: 10, idx: &tokenIndex{n: 10}}
	v := be.View(be.View(whole, 2, 6), 1, 3).(*buf)
	if v.root != whole || v.ptr != whole.ptr+12 || v.n != 3 {
		t.Fatalf("view of a view: root %p ptr %#x n %d", v.root, v.ptr, v.n)
	}
	v.dropIndex()
	if whole.idx.n != 0 {
		t.Error("dropIndex through a view left the allocation's index")
	}
}

// BenchmarkTokenIndex times the host's part of the embedding backward's index for one GPT-2
// micro-batch (B=16, T=1024 tokens drawn from the 50257 ids; real text has fewer distinct ids,
// which is faster). The trainer builds it while the GPU runs the previous step (pipelined steps),
// so it is on the GPU's critical path only after a step the host waited for.
func BenchmarkTokenIndex(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int32, 16*1024)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(50257))
	}
	var x tokenIndex
	b.ReportAllocs()
	for b.Loop() {
		if !x.build(tokens) {
			b.Fatal("not indexed")
		}
	}
}
