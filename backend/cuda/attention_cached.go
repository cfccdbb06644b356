package cuda

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// AttentionForwardCached appends the new positions' keys and values to the caches, then attends
// with one warp per (batch, head, new position); see backend.Ops and kernels/attention_cached.cu.
func (be *Backend) AttentionForwardCached(out, kcache, vcache, qkv backend.Buf, B, Tnew, pos, maxT, C, NH int) {
	if pos < 0 || Tnew < 1 || pos+Tnew > maxT {
		panic(fmt.Sprintf("cuda: cached attention at positions %d..%d outside the cache's %d", pos, pos+Tnew-1, maxT))
	}
	HS, ok := be.headSize("AttentionForwardCached", C, NH)
	n := int64(B) * int64(Tnew) * int64(C)
	x := qkv.DType() // the caches and out share it
	if !ok || !be.sameFormat("AttentionForwardCached", x, out, kcache, vcache) {
		return
	}
	be.launch("AttentionForwardCached", "attention_cache_append"+formatSuffix(x), Blocks(n, threads), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(kcache)).Ptr(ptrOf(vcache)).Ptr(ptrOf(qkv)).Int(B).Int(Tnew).Int(pos).Int(maxT).Int(C).Int(NH)
	})
	shared := (pos + Tnew + HS) * 4 // the scores and q
	be.launch("AttentionForwardCached", "attention_forward_cached"+formatSuffix(x), B*NH*Tnew, WarpSize, shared, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(kcache)).Ptr(ptrOf(vcache)).Ptr(ptrOf(qkv)).Int(B).Int(Tnew).Int(pos).Int(maxT).Int(C).Int(NH)
	})
}
