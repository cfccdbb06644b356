package dist

import "github.com/gpt2go/gpt2go/backend"

// Single is the communicator of a job of one process: rank 0 of 1. Sums over one rank leave
// buffers as they are (times scale), so the trainer calls the same collectives whether or not it
// was launched with several ranks.
type Single struct {
	be backend.Backend
}

// NewSingle returns the one-process communicator for buffers of be.
func NewSingle(be backend.Backend) *Single { return &Single{be: be} }

func (*Single) Rank() int { return 0 }
func (*Single) Size() int { return 1 }

func (s *Single) AllReduce(buf backend.Buf, scale float32) error {
	if err := CheckBuf("all-reduce", buf, 1, false); err != nil {
		return err
	}
	s.scale(buf, scale)
	return nil
}

func (s *Single) ReduceScatter(buf backend.Buf, scale float32) error {
	if err := CheckBuf("reduce-scatter", buf, 1, true); err != nil {
		return err
	}
	s.scale(buf, scale)
	return nil
}

func (*Single) AllGather(buf backend.Buf) error { return CheckBuf("all-gather", buf, 1, true) }

func (*Single) Broadcast(buf backend.Buf, root int) error {
	if err := CheckBuf("broadcast", buf, 1, false); err != nil {
		return err
	}
	return CheckRoot("broadcast", root, 1)
}

func (*Single) Barrier() error { return nil }
func (*Single) Abort(code int) { exit(code) }
func (*Single) Close() error   { return nil }

// scale multiplies buf by scale: in place in host memory, through the host elsewhere (one rank
// has nothing to sum, and the trainer's scales are 1 there, so this path is for completeness).
func (s *Single) scale(buf backend.Buf, scale float32) {
	if scale == 1 {
		return
	}
	if hm, ok := s.be.(backend.HostMemory); ok {
		Scale(hm.HostFloats(buf), scale)
		return
	}
	host := make([]float32, buf.Len())
	s.be.Download(host, buf)
	Scale(host, scale)
	s.be.Upload(buf, host)
}

// Scale multiplies x by scale in place (nothing when scale is 1, so a sum stays bit-exact).
func Scale(x []float32, scale float32) {
	if scale == 1 {
		return
	}
	for i := range x {
		x[i] = float32(x[i] * scale)
	}
}

var _ Comm = (*Single)(nil)
