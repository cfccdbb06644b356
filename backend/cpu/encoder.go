package cpu

import "github.com/gpt2go/gpt2go/backend"

// EncoderForward: out(B,T,C) = wte[tokens[b,t]] + wpe[t]; wpe may be nil.
func (be *Backend) EncoderForward(out, tokens, wte, wpe backend.Buf, B, T, C int) {
	encoderForward(&be.pool, Floats(out), Int32s(tokens), Floats(wte), Floats(wpe), B, T, C)
	be.round(out, B*T*C)
}

// EncoderBackward accumulates dout(B,T,C) into dwte(Vp,C) and dwpe(maxT,C); dwpe may be nil.
func (be *Backend) EncoderBackward(dwte, dwpe, dout, tokens backend.Buf, B, T, C int) {
	encoderBackward(&be.pool, Floats(dwte), Floats(dwpe), Floats(dout), Int32s(tokens), B, T, C)
	be.round(dwte, dwte.Len())
	if dwpe != nil {
		be.round(dwpe, T*C)
	}
}

// encoderForward: out(B,T,C) = wte(Vp,C)[tokens(B,T)] + wpe(maxT,C)[t]; wpe may be nil.
func encoderForward[F Float](p *pool, out []F, tokens []int32, wte, wpe []F, B, T, C int) {
	job := reuse[encoderJob[F]](p)
	*job = encoderJob[F]{out: out[:B*T*C], tokens: tokens[:B*T], wte: wte, wpe: wpe, T: T, C: C}
	p.forRanges(B*T, 16, job)
	*job = encoderJob[F]{}
}

type encoderJob[F Float] struct {
	out      []F
	tokens   []int32
	wte, wpe []F
	T, C     int
}

func (job *encoderJob[F]) runRange(lo, hi int) {
	C, T := job.C, job.T
	for bt := lo; bt < hi; bt++ {
		row := job.out[bt*C : bt*C+C]
		tok := int(job.tokens[bt])
		copy(row, job.wte[tok*C:tok*C+C])
		if job.wpe != nil {
			t := bt % T
			pos := job.wpe[t*C : t*C+C]
			for i := range row {
				row[i] += pos[i]
			}
		}
	}
}

// encoderBackward: dwte(Vp,C)[tokens[b,t]] += dout(B,T,C)[b,t] and dwpe(maxT,C)[t] += dout[b,t].
// A token can repeat, so goroutines split the channels rather than the positions: each gradient
// element then sums its contributions in (b,t) order on one goroutine.
func encoderBackward[F Float](p *pool, dwte, dwpe, dout []F, tokens []int32, B, T, C int) {
	job := reuse[encoderBackwardJob[F]](p)
	*job = encoderBackwardJob[F]{dwte: dwte, dwpe: dwpe, dout: dout[:B*T*C], tokens: tokens[:B*T], B: B, T: T, C: C}
	p.forRanges(C, 64, job)
	*job = encoderBackwardJob[F]{}
}

type encoderBackwardJob[F Float] struct {
	dwte, dwpe, dout []F
	tokens           []int32
	B, T, C          int
}

// runRange accumulates channels [lo, hi) of every position.
func (job *encoderBackwardJob[F]) runRange(lo, hi int) {
	C, T := job.C, job.T
	for bt := range job.B * T {
		d := job.dout[bt*C+lo : bt*C+hi]
		tok := int(job.tokens[bt])
		dtok := job.dwte[tok*C+lo : tok*C+hi]
		for i, g := range d {
			dtok[i] += g
		}
		if job.dwpe != nil {
			t := bt % T
			dpos := job.dwpe[t*C+lo : t*C+hi]
			for i, g := range d {
				dpos[i] += g
			}
		}
	}
}
