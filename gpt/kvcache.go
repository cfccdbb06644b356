package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// KVCache is the key/value cache that makes generation cost one position per new token: every
// layer's keys and values of the positions seen so far, for B sequences that advance together.
// Append runs only the new positions through the model, attending over the cache
// (AttentionForwardCached), so a prompt is encoded once and each new token then costs one row
// through every matmul (a matrix-vector product that reads the weights once) and one query
// against the cached keys, however long the context.
//
// Inference keeps nothing for a backward pass, so every layer reuses one set of activation
// buffers, sized for at most prefillRows rows; longer prompts are encoded in chunks.
type KVCache struct {
	m          *Model
	B, maxT    int
	pos        int           // positions filled, the same for every sequence
	chunk      int           // most positions per sequence in one pass
	keys, vals []backend.Buf // per layer (B,NH,maxT,HS)

	// Activations of one pass of B*chunk rows, shared by the layers. The residual stream
	// alternates between x and x2 so that no op writes a buffer it reads.
	tokens                                   backend.Buf // int32 (B,chunk)
	x, x2, ln, qkv, atty, proj, fch, fchGelu backend.Buf
	mean, rstd                               backend.Buf   // (B*chunk)
	logits                                   backend.Buf   // (B,Vp): each sequence's last position
	logitRows                                []backend.Buf // per sequence: its row of logits
	tokenHost                                []int32
}

// prefillRows is the most rows (B times positions) one pass of Append runs: enough for the blocked
// gemm to run at full speed on a prompt, small enough that the activations stay a few MB.
const prefillRows = 256

// NewKVCache allocates a cache for B sequences of up to maxT positions (at most the model's block
// size), empty. Its memory is the keys and values, 2*L*B*maxT*C floats, plus one pass's
// activations.
func (m *Model) NewKVCache(B, maxT int) (*KVCache, error) {
	c := m.Config
	if B < 1 || maxT < 1 {
		return nil, fmt.Errorf("kv cache: batch size and length must be >= 1 (got %d, %d)", B, maxT)
	}
	if maxT > c.BlockSize {
		return nil, fmt.Errorf("kv cache: %d positions exceed the model's block size %d", maxT, c.BlockSize)
	}
	be := m.be
	L, C, Vp := c.NumLayers, c.Channels, c.PaddedVocabSize
	kc := &KVCache{m: m, B: B, maxT: maxT, chunk: max(1, min(maxT, prefillRows/B))}
	N := B * kc.chunk
	// Checked before allocating (many samples fill memory) against what is free now, beside the
	// model, keeping half the backend's reserve: the model's own check kept it all, for scratch
	// that may grow later, and a training run keeps its cache.
	if mb, ok := be.(backend.MemoryBudgeter); ok {
		if budget, err := mb.MemoryBudget(); err == nil {
			el := int64(backend.ElementBytes(be, m.prec.Compute))
			plan := []backend.MemoryItem{
				{Name: "KV cache", Bytes: 2 * int64(L) * int64(B) * int64(maxT) * int64(C) * el},
				{Name: "generation activations", Bytes: int64(N)*int64(16*C)*el + int64(N)*12},
				{Name: "logits", Bytes: int64(B) * int64(Vp) * el},
			}
			budget.Reserve /= 2
			if err := backend.CheckPlan(plan, budget, nil); err != nil {
				return nil, fmt.Errorf("kv cache for %d sequences of %d positions: %w", B, maxT, err)
			}
		}
	}
	// As in Forward, the activations (and so the cached keys and values) are in the model's
	// compute format, the LayerNorm statistics fp32.
	a := func(n int) backend.Buf { return m.alloc(n, m.prec.Compute) }
	for range L {
		kc.keys = append(kc.keys, a(B*maxT*C))
		kc.vals = append(kc.vals, a(B*maxT*C))
	}
	kc.tokens = be.AllocInt32(N)
	kc.x, kc.x2, kc.ln, kc.atty, kc.proj = a(N*C), a(N*C), a(N*C), a(N*C), a(N*C)
	kc.qkv, kc.fch, kc.fchGelu = a(N*3*C), a(N*4*C), a(N*4*C)
	kc.mean, kc.rstd = be.Alloc(N), be.Alloc(N)
	kc.logits = a(B * Vp)
	kc.tokenHost = make([]int32, N)
	for b := range B {
		kc.logitRows = append(kc.logitRows, be.View(kc.logits, b*Vp, Vp))
	}
	return kc, nil
}

// Len is the number of positions in the cache.
func (kc *KVCache) Len() int { return kc.pos }

// Cap is the most positions the cache holds.
func (kc *KVCache) Cap() int { return kc.maxT }

// Truncate keeps the first n positions of every sequence (Truncate(0) empties the cache).
func (kc *KVCache) Truncate(n int) {
	if n < 0 || n > kc.pos {
		panic(fmt.Sprintf("kv cache: truncate to %d of %d positions", n, kc.pos))
	}
	kc.pos = n
}

// Append runs tokens (B,Tnew), each sequence's next Tnew tokens at positions Len()..Len()+Tnew-1,
// through the model, adds their keys and values to the cache and leaves each sequence's logits at
// its last new position for Logits. Token ids must be < V.
func (kc *KVCache) Append(tokens []int32, Tnew int) error {
	if Tnew < 1 || len(tokens) != kc.B*Tnew {
		return fmt.Errorf("kv cache: %d tokens for %d sequences of %d", len(tokens), kc.B, Tnew)
	}
	if kc.pos+Tnew > kc.maxT {
		return fmt.Errorf("kv cache: %d positions after %d exceed its %d", Tnew, kc.pos, kc.maxT)
	}
	V := int32(kc.m.Config.VocabSize)
	for i, tok := range tokens {
		if tok < 0 || tok >= V {
			return fmt.Errorf("token %d at position %d is outside the vocabulary [0,%d)", tok, i, V)
		}
	}
	defer backend.Scope(kc.m.be, "generate")()
	for t0 := 0; t0 < Tnew; t0 += kc.chunk {
		n := min(kc.chunk, Tnew-t0)
		for b := range kc.B {
			copy(kc.tokenHost[b*n:(b+1)*n], tokens[b*Tnew+t0:])
		}
		kc.forward(kc.tokenHost[:kc.B*n], n, t0+n == Tnew)
	}
	return nil
}

// Logits copies sequence b's logits (V real columns) at its last appended position into dst (len V).
func (kc *KVCache) Logits(dst []float32, b int) {
	kc.m.be.Download(dst, kc.logitRows[b])
}

// forward runs Tnew positions of each sequence (tokens (B,Tnew), Tnew <= chunk) at kc.pos, as
// Model.Forward does for a whole window, and with lastLogits the LM head on each sequence's last
// row.
func (kc *KVCache) forward(tokens []int32, Tnew int, lastLogits bool) {
	m, be := kc.m, kc.m.be
	c, p := m.Config, m.forwardParams()
	B, N := kc.B, kc.B*Tnew
	C, NH, Vp := c.Channels, c.NumHeads, c.PaddedVocabSize
	view := func(buf backend.Buf, n int) backend.Buf { return be.View(buf, 0, n) }
	x, x2, ln := view(kc.x, N*C), view(kc.x2, N*C), view(kc.ln, N*C)
	qkv, atty, proj := view(kc.qkv, N*3*C), view(kc.atty, N*C), view(kc.proj, N*C)
	fch, fchGelu := view(kc.fch, N*4*C), view(kc.fchGelu, N*4*C)
	mean, rstd := view(kc.mean, N), view(kc.rstd, N)

	toks := view(kc.tokens, N)
	be.UploadInt32(toks, tokens)
	var wpe backend.Buf // the rows of positions pos..pos+Tnew-1
	if !c.NoPositionalEmbs {
		wpe = be.View(p.wpe, kc.pos*C, Tnew*C)
	}
	be.EncoderForward(x, toks, p.wte, wpe, B, Tnew, C)
	be.LayerNormForward(ln, mean, rstd, x, p.ln1w[0], p.ln1b[0], N, C)
	for l := range c.NumLayers {
		m.matmulForward(qkv, ln, p.qkvw[l], p.qkvb[l], N, C, 3*C)
		be.AttentionForwardCached(atty, kc.keys[l], kc.vals[l], qkv, B, Tnew, kc.pos, kc.maxT, C, NH)
		m.matmulForward(proj, atty, p.attprojw[l], p.attprojb[l], N, C, C)
		be.ResidualLayerNormForward(x2, ln, mean, rstd, x, proj, p.ln2w[l], p.ln2b[l], N, C)
		m.matmulForward(fch, ln, p.fcw[l], p.fcb[l], N, C, 4*C)
		be.GeluForward(fchGelu, fch, N*4*C)
		m.matmulForward(proj, fchGelu, p.fcprojw[l], p.fcprojb[l], N, 4*C, C)
		if l+1 < c.NumLayers {
			be.ResidualLayerNormForward(x, ln, mean, rstd, x2, proj, p.ln1w[l+1], p.ln1b[l+1], N, C)
		} else {
			be.ResidualLayerNormForward(x, ln, mean, rstd, x2, proj, p.lnfw, p.lnfb, N, C)
		}
	}
	kc.pos += Tnew
	if !lastLogits {
		return
	}
	// Only the last position's logits are needed: with one position per sequence its rows are ln
	// itself, else each sequence's last row takes its own matrix-vector product.
	if Tnew == 1 {
		m.matmulForward(view(kc.logits, B*Vp), ln, p.head, nil, B, C, Vp)
		return
	}
	for b := range B {
		last := be.View(kc.ln, (b*Tnew+Tnew-1)*C, C)
		m.matmulForward(kc.logitRows[b], last, p.head, nil, 1, C, Vp)
	}
}

// forwardParams are the weights the forward pass reads (the compute copy in a mixed plan).
func (m *Model) forwardParams() *paramViews { return &m.fwd }
