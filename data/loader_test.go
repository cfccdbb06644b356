package data

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shardsOf writes shards whose tokens are base+0, base+1, ... so every token tells where it came
// from: shard i holds i*1000 + position.
func shardsOf(t *testing.T, lengths ...int) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, n := range lengths {
		tokens := make([]uint16, n)
		for j := range tokens {
			tokens[j] = uint16(i*1000 + j)
		}
		path := filepath.Join(dir, "train_"+string(rune('a'+i))+".bin")
		if err := WriteShard(path, tokens); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	return paths
}

func batch(t *testing.T, l *Loader) (inputs, targets []int32) {
	t.Helper()
	inputs, targets = make([]int32, l.B*l.T), make([]int32, l.B*l.T)
	if err := l.Next(inputs, targets); err != nil {
		t.Fatal(err)
	}
	return inputs, targets
}

func TestLoaderSequential(t *testing.T) {
	// B*T = 4, so a batch reads 5 tokens. Shard 0 (11 tokens) gives batches at 0 and 4 (8+5 > 11),
	// shard 1 (3 tokens) is too short and skipped, shard 2 (5 tokens) gives one batch, then wrap.
	paths := shardsOf(t, 11, 3, 5)
	l, err := NewLoader(paths, 2, 2, 0, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !slices.Equal(l.Skipped(), paths[1:2]) {
		t.Fatalf("Skipped = %v", l.Skipped())
	}
	if l.Batches() != 2+0+1 {
		t.Fatalf("Batches = %d", l.Batches())
	}
	wantStarts := []int32{0, 4, 2000, 0, 4}
	for _, start := range wantStarts {
		in, tg := batch(t, l)
		for i := range in {
			if in[i] != start+int32(i) || tg[i] != start+int32(i)+1 {
				t.Fatalf("batch from %d: inputs %v targets %v", start, in, tg)
			}
		}
	}
	l.Reset()
	if in, _ := batch(t, l); in[0] != 0 {
		t.Fatalf("after Reset batch starts at %d", in[0])
	}
}

func TestLoaderStateRestore(t *testing.T) {
	for _, shuffle := range []bool{false, true} {
		paths := shardsOf(t, 50, 31, 77)
		a, err := NewLoader(paths, 2, 3, 0, shuffle, 42)
		if err != nil {
			t.Fatal(err)
		}
		for range 7 {
			batch(t, a)
		}
		st := a.State()
		js, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var want [][]int32
		for range 20 {
			in, tg := batch(t, a)
			want = append(want, in, tg)
		}
		b, err := NewLoader(paths, 2, 3, 0, shuffle, 999) // seed is overridden by the state
		if err != nil {
			t.Fatal(err)
		}
		var back LoaderState
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if err := b.Restore(back); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			in, tg := batch(t, b)
			if !slices.Equal(in, want[2*i]) || !slices.Equal(tg, want[2*i+1]) {
				t.Fatalf("shuffle=%v: batch %d after Restore differs", shuffle, i)
			}
		}
		if err := b.Restore(LoaderState{Shuffle: !shuffle}); err == nil {
			t.Fatal("restored a state of the other mode")
		}
		a.Close()
		b.Close()
	}
}

func TestLoaderShuffle(t *testing.T) {
	paths := shardsOf(t, 40, 4, 100) // shard 1 is shorter than T+1: no windows
	l, err := NewLoader(paths, 4, 8, 0, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seen := map[int32]int{}
	first, _ := batch(t, l)
	for range 500 {
		in, tg := batch(t, l)
		for b := range 4 {
			row, next := in[b*8:(b+1)*8], tg[b*8:(b+1)*8]
			shard, start := row[0]/1000, row[0]%1000
			seen[shard]++
			for i := range row {
				if row[i] != row[0]+int32(i) || next[i] != row[i]+1 {
					t.Fatalf("row is not a contiguous window: %v / %v", row, next)
				}
			}
			if shard == 1 || (shard == 0 && start > 40-9) || (shard == 2 && start > 100-9) {
				t.Fatalf("window %d of shard %d out of range", start, shard)
			}
		}
	}
	// Windows: 32 in shard 0, 92 in shard 2, so shard 2 is drawn about 3x as often.
	if ratio := float64(seen[2]) / float64(seen[0]); ratio < 2.2 || ratio > 3.7 {
		t.Fatalf("shard 2/shard 0 draws = %v, want about 92/32", ratio)
	}
	l.Reset()
	if again, _ := batch(t, l); !slices.Equal(again, first) {
		t.Fatal("Reset did not restart the random sequence")
	}
}

func TestLoaderErrors(t *testing.T) {
	paths := shardsOf(t, 10, 8)
	tests := []struct {
		name    string
		shards  []string
		B, T    int
		vocab   int
		shuffle bool
		want    string
	}{
		{"too short", paths[:1], 3, 4, 0, false, "data too short: 10 tokens, fewer than a batch's B*T+1 = 13; use a smaller --batch-size/--seq-len or more data"},
		{"short shards", paths, 3, 4, 0, false, "data in short shards: read in order, a batch is B*T+1 = 13 tokens from one shard, but the longest has 10; use --shuffle"},
		{"too short shuffle", paths, 5, 4, 0, true, "data too short: 18 tokens, fewer than a batch's B*T+1 = 21"},
		{"no windows", paths, 1, 10, 0, true, "data too short: a window is T+1 = 11 tokens, but the longest shard has 10; use a shorter --seq-len"},
		{"no shards", nil, 1, 1, 0, false, "no shards"},
		{"bad shape", paths, 0, 4, 0, false, "must be positive"},
		{"missing shard", []string{paths[0], paths[0] + ".gone"}, 1, 1, 0, false, "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLoader(tc.shards, tc.B, tc.T, tc.vocab, tc.shuffle, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	// Token 1004 (shard 1, offset 4) is out of a 1004-token vocabulary; shard 0 is fine.
	l, err := NewLoader(paths, 1, 4, 1004, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	in, tg := make([]int32, 4), make([]int32, 4)
	if err := l.Next(in, tg); err != nil {
		t.Fatal(err)
	}
	l.Next(in, tg)
	err = l.Next(in, tg)
	if err == nil || !strings.Contains(err.Error(), paths[1]+": token 1004 at offset 4 is >= vocab size 1004") {
		t.Fatalf("vocab check: %v", err)
	}
	if err := l.Next(make([]int32, 3), tg); err == nil {
		t.Fatal("wrong buffer size accepted")
	}
	if err := l.Restore(LoaderState{Shard: 5}); err == nil {
		t.Fatal("restored a shard index out of range")
	}
	l.Close()
	if err := l.Next(in, tg); err == nil {
		t.Fatal("Next after Close")
	}
}

// Spread mode puts its rows in the middle of equal shares of all windows of all shards: with T=4,
// shards of 103, 3 and 53 tokens have 99 + 0 + 49 = 148 windows, and 3 batches of B=2 rows take
// windows floor((2r+1)*148/12) = 12, 37, 61, 86, 111, 135, the last two in the third shard. After
// the last row it starts over; Reset and Restore go back to a given row.
func TestLoaderSpread(t *testing.T) {
	paths := shardsOf(t, 103, 3, 53)
	l, err := NewEvalLoader(paths, 2, 4, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wantStarts := []int32{12, 37, 61, 86, 2012, 2036, 12, 37}
	var got []int32
	for range len(wantStarts) / 2 {
		in, tg := batch(t, l)
		for b := range 2 {
			row, next := in[b*4:(b+1)*4], tg[b*4:(b+1)*4]
			for i := range row {
				if row[i] != row[0]+int32(i) || next[i] != row[i]+1 {
					t.Fatalf("row %v targets %v are not one window", row, next)
				}
			}
			got = append(got, row[0])
		}
	}
	if !slices.Equal(got, wantStarts) {
		t.Fatalf("row starts %v, want %v", got, wantStarts)
	}
	l.Reset()
	if in, _ := batch(t, l); in[0] != 12 || in[4] != 37 {
		t.Fatalf("after Reset the first batch starts %d, %d", in[0], in[4])
	}
	st := l.State()
	batch(t, l)
	if err := l.Restore(st); err != nil {
		t.Fatal(err)
	}
	if in, _ := batch(t, l); in[0] != 61 {
		t.Fatalf("after Restore the batch starts at %d, want 61", in[0])
	}
	if err := l.Restore(LoaderState{Row: 6}); err == nil {
		t.Error("Restore accepted row 6 of 6")
	}

	// batches <= 0: one sequential pass's worth of rows (Batches = 12 + 0 + 6 batches of 8
	// tokens), spread over the 148 windows: consecutive rows about 148/36 windows apart.
	whole, err := NewEvalLoader(paths, 2, 4, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	if whole.spreadRows != 2*18 {
		t.Fatalf("whole split: %d rows, want 36", whole.spreadRows)
	}
	// A split with fewer than B*T+1 tokens still evaluates, as long as one row fits.
	small, err := NewEvalLoader(shardsOf(t, 6), 4, 4, 0, 1)
	if err != nil {
		t.Fatalf("a 6-token split with T=4: %v", err)
	}
	small.Close()
	if _, err := NewEvalLoader(shardsOf(t, 4), 1, 4, 0, 1); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("a 4-token split with T=4: err = %v", err)
	}
}

// Skip must leave a loader exactly where Next would: data-parallel ranks skip each other's
// batches and must stay at one global position.
func TestLoaderSkip(t *testing.T) {
	paths := shardsOf(t, 40, 3, 32) // B*T = 8 divides 40 and 32: the shard ends exactly where a batch would
	open := map[string]func() (*Loader, error){
		"sequential": func() (*Loader, error) { return NewLoader(paths, 2, 4, 0, false, 7) },
		"shuffle":    func() (*Loader, error) { return NewLoader(paths, 2, 4, 0, true, 7) },
		"spread":     func() (*Loader, error) { return NewEvalLoader(paths, 2, 4, 0, 5) },
	}
	for name, newLoader := range open {
		t.Run(name, func(t *testing.T) {
			all, err := newLoader()
			if err != nil {
				t.Fatal(err)
			}
			defer all.Close()
			skipping, err := newLoader()
			if err != nil {
				t.Fatal(err)
			}
			defer skipping.Close()
			for i := range 23 {
				in, tg := batch(t, all)
				if i%3 != 1 {
					if err := skipping.Skip(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				in2, tg2 := batch(t, skipping)
				if !slices.Equal(in, in2) || !slices.Equal(tg, tg2) {
					t.Fatalf("batch %d after skips: %v, want %v", i, in2, in)
				}
			}
			a, _ := json.Marshal(all.State())
			b, _ := json.Marshal(skipping.State())
			if string(a) != string(b) {
				t.Fatalf("state after skips %s, want %s", b, a)
			}
		})
	}
}

// Unread counts what an in-order pass skips: each shard's tail shorter than a batch.
func TestLoaderUnread(t *testing.T) {
	paths := shardsOf(t, 10, 8)
	l, err := NewLoader(paths, 1, 4, 0, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if unread, total := l.Unread(); unread != 6 || total != 18 {
		t.Errorf("in order, B=1 T=4 over 10+8 tokens: %d of %d unread, want 6 of 18 (2+1 batches of 4)", unread, total)
	}
	s, err := NewLoader(paths, 1, 4, 0, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if unread, _ := s.Unread(); unread != 0 {
		t.Errorf("shuffled: %d unread, want 0", unread)
	}
	if w := s.Windows(); w != 10 {
		t.Errorf("windows of T+1 = 5 tokens in 10+8 tokens: %d, want 6+4", w)
	}
}
