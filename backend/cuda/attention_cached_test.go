package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
)

// TestAttentionForwardCachedMatchesCPU feeds random q, k, v through the cached attention op on
// both backends, a prompt of several positions and then one position at a time, and compares
// every output and the caches (1e-5 relative L2, like the other attention ops).
func TestAttentionForwardCachedMatchesCPU(t *testing.T) {
	g := gpu(t, false)
	for _, s := range []struct{ B, T, C, NH int }{{3, 37, 96, 4}, {2, 70, 768, 12}} {
		t.Run(fmt.Sprintf("B=%d,T=%d,C=%d,NH=%d", s.B, s.T, s.C, s.NH), func(t *testing.T) {
			r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(11, uint64(s.T)))}
			B, C, NH, maxT := s.B, s.C, s.NH, s.T+5
			kcache, vcache := r.rand(B*maxT*C, 1), r.rand(B*maxT*C, 1) // positions past the fed ones stay as they are
			pos := 0
			for _, Tnew := range []int{7, 1, 1, 3, s.T - 12} {
				qkv, out := r.rand(B*Tnew*3*C, 1), r.rand(B*Tnew*C, 1)
				r.cpu.AttentionForwardCached(out.c, kcache.c, vcache.c, qkv.c, B, Tnew, pos, maxT, C, NH)
				g.AttentionForwardCached(out.g, kcache.g, vcache.g, qkv.g, B, Tnew, pos, maxT, C, NH)
				r.check(fmt.Sprintf("out at %d..%d", pos, pos+Tnew-1), out, 1e-5)
				pos += Tnew
			}
			r.check("kcache", kcache, 0)
			r.check("vcache", vcache, 0)
		})
	}
}
