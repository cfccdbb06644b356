package cuda

import (
	"math"
	"testing"

	"github.com/ebitengine/purego"
)

// Fork and Join order the side stream against the main one: a copy queued on the side stream
// after Fork reads what the main stream wrote before it, and a download queued on the main stream
// after Join reads the copy's result. The main stream is kept busy first (256 MiB memsets), so
// that a copy not held back by Fork would read the buffer while it is being written, and a
// download not held back by Join would run before the copy.
func TestSideStreamOrder(t *testing.T) {
	be := gpu(t, false)
	g := be.Device()
	side, err := g.SideStream()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := g.SideStream(); err != nil || again != side {
		t.Fatalf("SideStream again: %v, %v (want the same stream)", again, err)
	}
	const N = 64 << 20
	a, b := be.Alloc(N), be.Alloc(N)
	pa, _ := DevicePointer(a)
	pb, _ := DevicePointer(b)
	got := make([]float32, N)
	for round := 1; round <= 4; round++ {
		want := float32(round)
		for range 8 {
			if err := g.Memset32(pa, math.Float32bits(want), N); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Fork(); err != nil {
			t.Fatal(err)
		}
		unbind := g.Bind()
		err := g.drv.check("cuMemcpyDtoDAsync (side)", first(purego.SyscallN(g.drv.memcpyDtoDAsync, pb, pa, uintptr(4*N), side)))
		unbind()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Join(); err != nil {
			t.Fatal(err)
		}
		be.Download(got, b)
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if x != want {
				t.Fatalf("round %d: element %d is %v after the side stream's copy, want %v", round, i, x, want)
			}
		}
	}
}
