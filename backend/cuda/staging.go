package cuda

import (
	"unsafe"
)

// Uploads go through page-locked staging memory: the host copies src there and queues the copy
// to the GPU, which then returns at once. An upload straight from pageable (ordinary Go) memory
// makes the driver stage it itself, and it may wait for the stream's queued work first, which
// would undo the trainer's pipelining (train/step.go): the next step's tokens would wait for
// the last step's end.
//
// The staging memory is a ring of chunks handed out in order. A full chunk is retired with an
// event recorded behind its last copy and reused once that event is done; when every chunk is
// still in flight a new one is allocated, up to stageChunks, and after that the host waits for
// the oldest. An upload bigger than a chunk (parameters, at load time) goes the pageable way.

// stageChunkBytes is one chunk: the tokens, targets and token index of GPT-2 124M at B=16,
// T=1024 (64 + 64 + 192 KiB) fit several times over.
const stageChunkBytes = 4 << 20

// stageChunks bounds the chunks (32 MiB of page-locked memory).
const stageChunks = 8

// stageDevice is what staging needs of the GPU: page-locked memory and events (a fake in tests).
type stageDevice interface {
	AllocHost(bytes int64) (unsafe.Pointer, error)
	NewEvent() (uintptr, error)
	Record(e uintptr) error
	EventDone(e uintptr) (bool, error)
	WaitEvent(e uintptr) error
}

type stageChunk struct {
	mem   []byte
	used  int
	event uintptr // recorded when the chunk was retired
}

type staging struct {
	dev     stageDevice
	cur     *stageChunk
	retired []*stageChunk // oldest first
	count   int           // chunks allocated
	waits   int           // times the host waited for a chunk (for tests and --verbose)
}

// take returns n bytes of staging memory for one upload queued after this call, or nil when n
// is larger than a chunk (upload from pageable memory then).
func (s *staging) take(n int) ([]byte, error) {
	if n > stageChunkBytes {
		return nil, nil
	}
	if s.cur == nil || s.cur.used+n > len(s.cur.mem) {
		if err := s.next(); err != nil {
			return nil, err
		}
	}
	b := s.cur.mem[s.cur.used : s.cur.used+n : s.cur.used+n]
	s.cur.used += n
	return b, nil
}

// next retires the current chunk and makes another current: the oldest retired one if its
// copies are done, else a new one, else the oldest once its copies are done.
func (s *staging) next() error {
	if c := s.cur; c != nil {
		s.cur = nil
		if c.event == 0 {
			e, err := s.dev.NewEvent()
			if err != nil {
				return err
			}
			c.event = e
		}
		if err := s.dev.Record(c.event); err != nil {
			return err
		}
		s.retired = append(s.retired, c)
	}
	if len(s.retired) > 0 {
		done, err := s.dev.EventDone(s.retired[0].event)
		if err != nil {
			return err
		}
		if done || s.count == stageChunks {
			if !done {
				s.waits++
				if err := s.dev.WaitEvent(s.retired[0].event); err != nil {
					return err
				}
			}
			s.cur, s.retired = s.retired[0], s.retired[1:]
			s.cur.used = 0
			return nil
		}
	}
	p, err := s.dev.AllocHost(stageChunkBytes)
	if err != nil {
		return err
	}
	s.count++
	s.cur = &stageChunk{mem: unsafe.Slice((*byte)(p), stageChunkBytes)}
	return nil
}

// htod queues a copy of bytes at src to the device at dst through staging memory, so it returns
// at once; src may be reused when it returns.
func (be *Backend) htod(dst uintptr, src unsafe.Pointer, bytes int64) {
	if be.err != nil || bytes == 0 {
		return
	}
	if err := be.g.refuseInCapture("a copy from the host"); err != nil {
		be.fail(err) // before take, which would retire a chunk with an event a recording refuses
		return
	}
	if be.stage.dev == nil {
		be.stage.dev = be.g
	}
	buf, err := be.stage.take(int(bytes))
	if err != nil {
		be.fail(err)
		return
	}
	if buf == nil {
		be.fail(be.g.HtoD(dst, src, bytes))
		return
	}
	copy(buf, unsafe.Slice((*byte)(src), bytes))
	be.fail(be.g.HtoD(dst, unsafe.Pointer(&buf[0]), bytes))
}
