package data

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"sort"
)

// Loader cuts batches of B sequences of T tokens from shards, reading each batch's tokens with
// ReadAt into buffers allocated once, so memory does not depend on the corpus size. A Loader is
// not safe for concurrent use.
//
// Sequential mode (llm.c's DataLoader): a batch is the next B*T+1 tokens of the current shard,
// laid out as B rows of T; the position then advances by B*T, so consecutive batches overlap by
// the one token that is the last target. When fewer than B*T+1 tokens remain, the loader moves
// to the next shard, wrapping around to the first after the last. Shards shorter than B*T+1
// tokens are skipped (see Skipped).
//
// Shuffle mode (nanoGPT's get_batch): each row is T+1 tokens read at an offset drawn uniformly
// from all windows of all shards (a shard is picked with probability proportional to its number
// of windows, then the offset within it), from a seeded PCG generator.
//
// Spread mode (NewEvalLoader, for validation): a fixed set of rows, each T+1 tokens, at offsets
// spaced evenly over all windows of all shards, so that a few batches of evaluation sample the
// whole split rather than its first few thousand tokens; after the last row it starts over, and
// Reset returns to the first, so every evaluation sees the same rows.
type Loader struct {
	B, T       int
	vocabSize  int
	shuffle    bool
	seed       uint64
	spreadRows int64 // spread mode: the number of rows in the fixed set; 0 in the other modes
	row        int64 // spread mode: index of the next row

	shards  []loaderShard
	usable  []int // indices of shards long enough for sequential batches
	skipped []string
	// shuffle and spread: windowEnd[i] is the number of windows in shards[0..i], for finding a
	// window's shard.
	windowEnd []int64

	shard int   // sequential: index into shards of the current shard
	pos   int64 // sequential: token offset of the next batch in the current shard
	pcg   *rand.PCG
	rng   *rand.Rand

	raw []byte // B*T+1 little-endian tokens
}

type loaderShard struct {
	ShardInfo
	file *os.File
}

// LoaderState is where a Loader is in its data, enough to continue bit-exactly after Restore.
// It is plain JSON, for checkpoints.
type LoaderState struct {
	Shuffle bool   `json:"shuffle"`
	Shard   int    `json:"shard"`         // sequential: index of the current shard in the shard list
	Pos     int64  `json:"pos"`           // sequential: token offset of the next batch in that shard
	Row     int64  `json:"row,omitempty"` // spread: index of the next row
	RNG     []byte `json:"rng,omitempty"` // shuffle: the PCG generator's MarshalBinary
}

// NewLoader opens shards for (B, T) batches. vocabSize > 0 makes every batch check that its
// tokens are < vocabSize; 0 skips the check (vocabulary unknown).
func NewLoader(shards []string, B, T int, vocabSize int, shuffle bool, seed uint64) (*Loader, error) {
	return newLoader(shards, B, T, vocabSize, shuffle, seed, 0)
}

// NewEvalLoader opens shards for evaluation in spread mode: batches batches of B rows at offsets
// spaced evenly over the shards (see Loader). batches <= 0 means as many as one sequential pass
// would give (Batches), which covers the split with rows that barely overlap.
func NewEvalLoader(shards []string, B, T int, vocabSize int, batches int) (*Loader, error) {
	l, err := newLoader(shards, B, T, vocabSize, false, 0, 1)
	if err != nil {
		return nil, err
	}
	if batches <= 0 {
		batches = int(max(1, l.Batches()))
	}
	l.spreadRows = int64(batches) * int64(B)
	return l, nil
}

func newLoader(shards []string, B, T int, vocabSize int, shuffle bool, seed uint64, spreadRows int64) (*Loader, error) {
	if B <= 0 || T <= 0 {
		return nil, fmt.Errorf("loader: batch size %d and sequence length %d must be positive", B, T)
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("loader: no shards given")
	}
	l := &Loader{B: B, T: T, vocabSize: vocabSize, shuffle: shuffle, seed: seed, spreadRows: spreadRows}
	need := int64(B*T + 1)
	var longest, total int64
	for _, path := range shards {
		info, err := ReadShardHeader(path)
		if err != nil {
			l.Close()
			return nil, err
		}
		f, err := os.Open(path)
		if err != nil {
			l.Close()
			return nil, openError(path, err)
		}
		l.shards = append(l.shards, loaderShard{info, f})
		longest = max(longest, info.Tokens)
		total += info.Tokens
	}
	if shuffle || spreadRows > 0 {
		var windows int64
		for _, s := range l.shards {
			windows += max(0, s.Tokens-int64(T))
			l.windowEnd = append(l.windowEnd, windows)
		}
		switch {
		case windows == 0:
			l.Close()
			return nil, fmt.Errorf("data too short: a window is T+1 = %d tokens, but the longest shard has %d; use a shorter --seq-len or more data", T+1, longest)
		case shuffle && total < need:
			l.Close()
			return nil, tooShort(total, need)
		}
		if shuffle {
			l.pcg = rand.NewPCG(pcgSeeds(seed))
			l.rng = rand.New(l.pcg)
		}
	} else {
		for i, s := range l.shards {
			if s.Tokens >= need {
				l.usable = append(l.usable, i)
			} else {
				l.skipped = append(l.skipped, s.Path)
			}
		}
		if len(l.usable) == 0 {
			split := len(l.shards) > 1 && total >= need // the tokens are there, in short shards
			l.Close()
			if split {
				return nil, fmt.Errorf("data in short shards: read in order, a batch is B*T+1 = %d tokens from one shard, but the longest has %d; use --shuffle, a smaller --batch-size/--seq-len, or prepare again with a larger --shard-tokens", need, longest)
			}
			return nil, tooShort(longest, need)
		}
		l.shard = l.usable[0]
	}
	l.raw = make([]byte, 2*need)
	return l, nil
}

// pcgSeeds expands one seed into PCG's two words (the second an arbitrary odd constant mix, so
// seed 0 is fine).
func pcgSeeds(seed uint64) (uint64, uint64) { return seed, seed ^ 0x9e3779b97f4a7c15 }

func tooShort(have, need int64) error {
	return fmt.Errorf("data too short: %d tokens, fewer than a batch's B*T+1 = %d; use a smaller --batch-size/--seq-len or more data", have, need)
}

// Skipped lists the shards that sequential mode skips because they hold fewer than B*T+1 tokens.
func (l *Loader) Skipped() []string { return l.skipped }

// Windows is the number of distinct windows of T+1 tokens the shards hold: what random and
// spread rows are drawn from (a spread evaluation of more rows than this repeats some).
func (l *Loader) Windows() int64 {
	if len(l.windowEnd) == 0 {
		return 0
	}
	return l.windowEnd[len(l.windowEnd)-1]
}

// Unread is how many of the shards' tokens one in-order pass never reads (a shard's tail
// shorter than a batch, and shards shorter than one), of how many: 0 in shuffle mode, whose
// windows reach every token.
func (l *Loader) Unread() (unread, total int64) {
	for _, s := range l.shards {
		total += s.Tokens
	}
	if l.shuffle || l.spreadRows > 0 {
		return 0, total
	}
	return total - l.Batches()*int64(l.B*l.T), total
}

// Batches is the number of batches one sequential pass over the shards yields (in shuffle mode,
// the same count, as a measure of an epoch).
func (l *Loader) Batches() int64 {
	var n int64
	for _, s := range l.shards {
		n += max(0, (s.Tokens-1)/int64(l.B*l.T))
	}
	return n
}

// Next fills inputs and targets, each B*T long (row-major (B, T)), with the next batch:
// targets[i] is the token after inputs[i].
func (l *Loader) Next(inputs, targets []int32) error {
	if l.shards == nil {
		return fmt.Errorf("loader: Next after Close")
	}
	n := l.B * l.T
	if len(inputs) != n || len(targets) != n {
		return fmt.Errorf("loader: inputs and targets must hold B*T = %d tokens, got %d and %d", n, len(inputs), len(targets))
	}
	if l.shuffle || l.spreadRows > 0 {
		row := l.raw[:2*(l.T+1)]
		for b := range l.B {
			window := l.nextWindow()
			i := sort.Search(len(l.windowEnd), func(i int) bool { return l.windowEnd[i] > window })
			offset := window
			if i > 0 {
				offset -= l.windowEnd[i-1]
			}
			if err := l.read(i, offset, row); err != nil {
				return err
			}
			l.fill(row, inputs[b*l.T:(b+1)*l.T], targets[b*l.T:(b+1)*l.T])
		}
		return nil
	}
	shard, pos := l.nextBatch()
	if err := l.read(shard, pos, l.raw); err != nil {
		return err
	}
	l.fill(l.raw, inputs, targets)
	return nil
}

// nextWindow returns the window (an index over all shards' windows) of the next row in shuffle
// and spread modes, and moves past it.
func (l *Loader) nextWindow() int64 {
	windows := l.windowEnd[len(l.windowEnd)-1]
	if l.shuffle {
		return l.rng.Int64N(windows)
	}
	// The middle of the row's equal share of the windows (128-bit product: the counts can be
	// large).
	hi, lo := bits.Mul64(uint64(2*l.row+1), uint64(windows))
	q, _ := bits.Div64(hi, lo, uint64(2*l.spreadRows))
	l.row = (l.row + 1) % l.spreadRows
	return int64(q)
}

// nextBatch returns the shard and token offset of the next sequential batch (B*T+1 tokens) and
// moves past it.
func (l *Loader) nextBatch() (shard int, pos int64) {
	n := int64(l.B * l.T)
	if l.pos+n+1 > l.shards[l.shard].Tokens {
		l.advanceShard()
	}
	shard, pos = l.shard, l.pos
	l.pos += n
	return shard, pos
}

// Skip moves past the next batch exactly as Next would, without reading it: the same random
// draws in shuffle mode, the same position otherwise. Data-parallel ranks each read their own
// batches of one global sequence and skip the others', so every rank's loader stays at the same
// global position (one state for a checkpoint, whatever the world size).
func (l *Loader) Skip() error {
	if l.shards == nil {
		return fmt.Errorf("loader: Skip after Close")
	}
	if l.shuffle || l.spreadRows > 0 {
		for range l.B {
			l.nextWindow()
		}
	} else {
		l.nextBatch()
	}
	return nil
}

// advanceShard moves to the next usable shard, wrapping around.
func (l *Loader) advanceShard() {
	next := l.usable[0]
	for _, i := range l.usable {
		if i > l.shard {
			next = i
			break
		}
	}
	l.shard, l.pos = next, 0
}

// read reads len(dst)/2 tokens of shard i starting at token offset and checks them against the
// vocabulary.
func (l *Loader) read(i int, offset int64, dst []byte) error {
	s := &l.shards[i]
	if _, err := s.file.ReadAt(dst, s.DataOffset+2*offset); err != nil {
		return fmt.Errorf("shard %s: read %d tokens at token %d: %w", s.Path, len(dst)/2, offset, err)
	}
	if l.vocabSize <= 0 {
		return nil
	}
	for k := 0; k < len(dst); k += 2 {
		if tok := int(binary.LittleEndian.Uint16(dst[k:])); tok >= l.vocabSize {
			return fmt.Errorf("shard %s: token %d at offset %d is >= vocab size %d; the data was prepared with a different tokenizer, re-run gpt2go prepare",
				s.Path, tok, offset+int64(k/2), l.vocabSize)
		}
	}
	return nil
}

// fill decodes len(inputs)+1 tokens from raw into inputs and the shifted targets.
func (l *Loader) fill(raw []byte, inputs, targets []int32) {
	prev := int32(binary.LittleEndian.Uint16(raw))
	for i := range inputs {
		next := int32(binary.LittleEndian.Uint16(raw[2*(i+1):]))
		inputs[i], targets[i] = prev, next
		prev = next
	}
}

// State returns the loader's position; Restore(State()) continues with the same batches.
func (l *Loader) State() LoaderState {
	st := LoaderState{Shuffle: l.shuffle, Shard: l.shard, Pos: l.pos, Row: l.row}
	if l.shuffle {
		st.Shard, st.Pos = 0, 0
		st.RNG, _ = l.pcg.MarshalBinary() // never fails
	}
	return st
}

// Restore puts the loader back where State was taken (on a loader over the same shards with the
// same B and T).
func (l *Loader) Restore(st LoaderState) error {
	if st.Shuffle != l.shuffle {
		return fmt.Errorf("loader: cannot restore a shuffle=%v state into a shuffle=%v loader", st.Shuffle, l.shuffle)
	}
	if l.shuffle {
		if err := l.pcg.UnmarshalBinary(st.RNG); err != nil {
			return fmt.Errorf("loader: restore random state: %w", err)
		}
		return nil
	}
	if l.spreadRows > 0 {
		if st.Row < 0 || st.Row >= l.spreadRows {
			return fmt.Errorf("loader: state row %d does not fit these %d evaluation rows", st.Row, l.spreadRows)
		}
		l.row = st.Row
		return nil
	}
	if st.Shard < 0 || st.Shard >= len(l.shards) || st.Pos < 0 || st.Pos > l.shards[st.Shard].Tokens {
		return fmt.Errorf("loader: state (shard %d, position %d) does not fit these %d shards; was the data changed since the checkpoint?", st.Shard, st.Pos, len(l.shards))
	}
	if l.shards[st.Shard].Tokens < int64(l.B*l.T+1) {
		return fmt.Errorf("loader: state points at shard %s, which is too short for B*T+1 = %d tokens", l.shards[st.Shard].Path, l.B*l.T+1)
	}
	l.shard, l.pos = st.Shard, st.Pos
	return nil
}

// Reset restarts from the beginning: the first shard (sequential), the initial seed (shuffle) or
// the first row (spread). Evaluation resets the val loader before each pass so every pass sees
// the same batches.
func (l *Loader) Reset() {
	switch {
	case l.spreadRows > 0:
		l.row = 0
	case l.shuffle:
		l.pcg.Seed(pcgSeeds(l.seed))
	default:
		l.shard, l.pos = l.usable[0], 0
	}
}

// Close closes the shard files.
func (l *Loader) Close() error {
	var first error
	for _, s := range l.shards {
		if s.file != nil {
			if err := s.file.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	l.shards = nil
	return first
}
