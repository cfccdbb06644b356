package cuda

import (
	"testing"
	"unsafe"
)

// fakeStage stands in for the GPU in staging's bookkeeping: events complete when the test says
// (or when the host waits for one), and every chunk's memory is Go memory.
type fakeStage struct {
	next     uintptr
	recorded map[uintptr]int // event -> how many times recorded
	done     map[uintptr]bool
	waited   []uintptr
	allocs   int
	keep     [][]byte
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func newFakeStage() *fakeStage {
	return &fakeStage{recorded: map[uintptr]int{}, done: map[uintptr]bool{}}
}

func (f *fakeStage) AllocHost(bytes int64) (unsafe.Pointer, error) {
	f.allocs++
	b := make([]byte, bytes)
	f.keep = append(f.keep, b)
	return unsafe.Pointer(&b[0]), nil
}
func (f *fakeStage) NewEvent() (uintptr, error)        { f.next++; return f.next, nil }
func (f *fakeStage) Record(e uintptr) error            { f.recorded[e]++; f.done[e] = false; return nil }
func (f *fakeStage) EventDone(e uintptr) (bool, error) { return f.done[e], nil }
func (f *fakeStage) WaitEvent(e uintptr) error {
	f.waited = append(f.waited, e)
	f.done[e] = true
	return nil
}

// TestStagingRing: uploads are handed out in order within a chunk; a full chunk is retired
// with an event and reused only once that event is done (or waited for, when all stageChunks
// are in flight); no byte is handed out twice while a copy from it may still be queued; an
// upload bigger than a chunk is not staged.
func TestStagingRing(t *testing.T) {
	f := newFakeStage()
	s := &staging{dev: f}
	const n = stageChunkBytes / 4 // four uploads per chunk
	take := func() []byte {
		t.Helper()
		b, err := s.take(n)
		if err != nil || len(b) != n {
			t.Fatalf("take: %d bytes, %v", len(b), err)
		}
		return b
	}
	// The first chunk: four uploads, no event yet.
	var first []byte
	for i := range 4 {
		b := take()
		if i == 0 {
			first = b
		} else if addr(b) != addr(first)+uintptr(i*n) {
			t.Fatalf("upload %d is not next to the previous one", i)
		}
	}
	if f.allocs != 1 || len(f.recorded) != 0 {
		t.Fatalf("after one chunk: %d allocations, %d events, want 1 and 0", f.allocs, len(f.recorded))
	}
	// The fifth upload retires chunk 1 (its event recorded) and, chunk 1 being in flight, gets
	// a new chunk.
	b := take()
	if f.allocs != 2 || len(f.recorded) != 1 || &b[0] == &first[0] {
		t.Fatalf("fifth upload: %d allocations, %d events, same memory %v", f.allocs, len(f.recorded), &b[0] == &first[0])
	}
	// Chunk 1's copies done: the next retirement reuses it instead of allocating.
	for e := range f.recorded {
		f.done[e] = true
	}
	for range 3 {
		take()
	}
	b = take()
	if f.allocs != 2 || &b[0] != &first[0] {
		t.Fatalf("after chunk 1's event: %d allocations, reused chunk 1 %v; want 2 and true", f.allocs, &b[0] == &first[0])
	}
	// Nothing completes any more: chunks are added up to stageChunks, then the host waits for
	// the oldest, and only then is its memory handed out again.
	for range 4 * (stageChunks + 2) {
		take()
	}
	if f.allocs != stageChunks {
		t.Errorf("%d chunks allocated, want the cap %d", f.allocs, stageChunks)
	}
	if s.waits == 0 || len(f.waited) != s.waits {
		t.Errorf("the host waited %d times (fake saw %d), want some", s.waits, len(f.waited))
	}
	// Every chunk in the ring was recorded before it was reused.
	for _, c := range s.retired {
		if f.recorded[c.event] == 0 {
			t.Errorf("a retired chunk has no recorded event")
		}
	}
	if b, err := s.take(stageChunkBytes + 1); b != nil || err != nil {
		t.Errorf("an upload bigger than a chunk was staged (%d bytes, %v)", len(b), err)
	}
}

// TestStagingNeverReusesPendingMemory hands out uploads of odd sizes with events completing
// at random-ish times and checks that no region comes back while an upload from it may still
// be queued (its chunk retired, its event not done).
func TestStagingNeverReusesPendingMemory(t *testing.T) {
	f := newFakeStage()
	s := &staging{dev: f}
	pending := map[uintptr][2]uintptr{} // region start -> [end, event of its chunk or 0 while current]
	sizes := []int{1 << 20, 3 << 18, 64 << 10, 196 << 10, 2 << 20}
	for i := range 500 {
		n := sizes[i%len(sizes)]
		b, err := s.take(n)
		if err != nil {
			t.Fatal(err)
		}
		lo := addr(b)
		hi := lo + uintptr(n)
		for start, v := range pending {
			end, ev := v[0], v[1]
			if lo < end && start < hi {
				if ev == 0 || !f.done[ev] {
					t.Fatalf("upload %d: [%x,%x) overlaps [%x,%x), still in flight (event %d)", i, lo, hi, start, end, ev)
				}
				delete(pending, start)
			}
		}
		pending[lo] = [2]uintptr{hi, 0}
		// Regions of retired chunks now carry their chunk's event.
		for _, c := range s.retired {
			clo := addr(c.mem)
			for start, v := range pending {
				if start >= clo && start < clo+uintptr(len(c.mem)) && v[1] == 0 {
					pending[start] = [2]uintptr{v[0], c.event}
				}
			}
		}
		if i%7 == 3 && len(s.retired) > 0 { // the GPU catches up with the oldest chunk now and then
			f.done[s.retired[0].event] = true
		}
	}
}
