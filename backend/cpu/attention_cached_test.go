package cpu

import (
	"fmt"
	"testing"
)

// cachedSchedules split T positions into the chunks fed to the cached op one after another: one
// position at a time (decoding), a prompt then single tokens, uneven chunks, and all at once.
func cachedSchedules(T int) map[string][]int {
	ones := make([]int, T)
	for i := range ones {
		ones[i] = 1
	}
	prompt := []int{min(T, 5)}
	for range T - prompt[0] {
		prompt = append(prompt, 1)
	}
	var uneven []int
	for left, n := T, 3; left > 0; n = n%4 + 1 {
		uneven = append(uneven, min(n, left))
		left -= min(n, left)
	}
	return map[string][]int{"ones": ones, "prompt": prompt, "uneven": uneven, "whole": {T}}
}

// runCached feeds qkv(B,T,3C) through the cached op in the chunks of schedule, with caches of
// maxT positions that start filled with guardValue, and returns out(B,T,C) and the caches.
func runCached[F Float](p *pool, qkv []F, schedule []int, B, T, maxT, C, NH int) (out, kcache, vcache []F) {
	out = make([]F, B*T*C)
	kcache, vcache = make([]F, B*maxT*C), make([]F, B*maxT*C)
	for i := range kcache {
		kcache[i], vcache[i] = F(guardValue), F(guardValue)
	}
	pos := 0
	for _, n := range schedule {
		chunk, chunkOut := make([]F, B*n*3*C), make([]F, B*n*C)
		for b := range B {
			copy(chunk[b*n*3*C:(b+1)*n*3*C], qkv[(b*T+pos)*3*C:])
		}
		attentionForwardCached(p, chunkOut, kcache, vcache, chunk, B, n, pos, maxT, C, NH)
		for b := range B {
			copy(out[(b*T+pos)*C:(b*T+pos+n)*C], chunkOut[b*n*C:])
		}
		pos += n
	}
	return out, kcache, vcache
}

// TestAttentionForwardCached: feeding a sequence through the cache in any chunks gives the
// uncached attention's output at every position (float64: to 1e-12; float32 on the assembly and
// on the portable loops: to 1e-5, with the same bits for one thread as for three); the caches hold
// exactly each head's keys and values at positions 0..T-1 and nothing is written past them.
func TestAttentionForwardCached(t *testing.T) {
	defer func(saved bool) { useVecKernels = saved }(useVecKernels)
	shapes := []struct{ B, T, C, NH int }{{tB, tT, tC, tNH}, {3, 19, 128, 2}, {1, 2*attnKeyBlock + 7, 8, 2}}
	for _, s := range shapes {
		B, T, C, NH := s.B, s.T, s.C, s.NH
		HS, maxT := C/NH, T+3
		r := newRand(31)
		qkv := randoms[float64](r, B*T*3*C)
		want, _ := attentionReference(qkv, B, T, C, NH)
		qkv32 := make([]float32, len(qkv))
		for i, x := range qkv {
			qkv32[i] = float32(x)
		}
		for name, schedule := range cachedSchedules(T) {
			label := fmt.Sprintf("B=%d,T=%d,C=%d,NH=%d/%s", B, T, C, NH, name)
			out, kcache, vcache := runCached(testPool, qkv, schedule, B, T, maxT, C, NH)
			checkClose(t, label+" out", out, want, 1e-12)
			for b := range B {
				for h := range NH {
					for pos := range maxT {
						for i := range HS {
							k, v := kcache[((b*NH+h)*maxT+pos)*HS+i], vcache[((b*NH+h)*maxT+pos)*HS+i]
							wantK, wantV := float64(guardValue), float64(guardValue)
							if pos < T {
								wantK, wantV = qkv[(b*T+pos)*3*C+C+h*HS+i], qkv[(b*T+pos)*3*C+2*C+h*HS+i]
							}
							if k != wantK || v != wantV {
								t.Fatalf("%s: cache (b=%d,h=%d,pos=%d,%d) holds k %g v %g, want %g %g", label, b, h, pos, i, k, v, wantK, wantV)
							}
						}
					}
				}
			}
			for _, accelerated := range []bool{useVecKernels, false} {
				useVecKernels = accelerated
				one, _, _ := runCached(&pool{threads: 1}, qkv32, schedule, B, T, maxT, C, NH)
				three, _, _ := runCached(testPool, qkv32, schedule, B, T, maxT, C, NH)
				checkClose(t, fmt.Sprintf("%s asm=%v float32", label, accelerated), one, float32s(want), 1e-5)
				checkClose(t, fmt.Sprintf("%s asm=%v threads 3 vs 1", label, accelerated), three, one, 0)
			}
		}
	}
}

func TestAttentionForwardCachedRejectsOverflow(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("positions past the cache did not panic")
		}
	}()
	const B, C, NH, maxT = 1, 8, 2, 4
	attentionForwardCached(testPool, make([]float32, 2*C), make([]float32, maxT*C), make([]float32, maxT*C),
		make([]float32, 2*3*C), B, 2, maxT-1, maxT, C, NH)
}
