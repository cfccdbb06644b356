package cpu

import "github.com/gpt2go/gpt2go/backend"

// EncoderForward: out(B,T,C) = wte[tokens[b,t]] + wpe[t]; wpe may be nil.
func (be *Backend) EncoderForward(out, tokens, wte, wpe backend.Buf, B, T, C int) {
	encoderForward(&be.pool, Floats(out), Int32s(tokens), Floats(wte), Floats(wpe), B, T, C)
}

// EncoderBackward accumulates dout(B,T,C) into dwte(Vp,C) and dwpe(maxT,C); dwpe may be nil.
func (be *Backend) EncoderBackward(dwte, dwpe, dout, tokens backend.Buf, B, T, C int) {
	encoderBackward(&be.pool, Floats(dwte), Floats(dwpe), Floats(dout), Int32s(tokens), B, T, C)
}

// encoderForward: out(B,T,C) = wte(Vp,C)[tokens(B,T)] + wpe(maxT,C)[t]; wpe may be nil.
func encoderForward[F Float](p *pool, out []F, tokens []int32, wte, wpe []F, B, T, C int) {
	p.parallelFor(B*T, 16, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			row := out[bt*C : bt*C+C]
			tok := int(tokens[bt])
			copy(row, wte[tok*C:tok*C+C])
			if wpe != nil {
				t := bt % T
				pos := wpe[t*C : t*C+C]
				for i := range row {
					row[i] += pos[i]
				}
			}
		}
	})
}

// encoderBackward: dwte(Vp,C)[tokens[b,t]] += dout(B,T,C)[b,t] and dwpe(maxT,C)[t] += dout[b,t].
// A token can repeat, so goroutines split the channels rather than the positions: each gradient
// element then sums its contributions in (b,t) order on one goroutine.
func encoderBackward[F Float](p *pool, dwte, dwpe, dout []F, tokens []int32, B, T, C int) {
	p.parallelFor(C, 64, func(lo, hi int) {
		for bt := range B * T {
			d := dout[bt*C+lo : bt*C+hi]
			tok := int(tokens[bt])
			dtok := dwte[tok*C+lo : tok*C+hi]
			for i, g := range d {
				dtok[i] += g
			}
			if dwpe != nil {
				t := bt % T
				dpos := dwpe[t*C+lo : t*C+hi]
				for i, g := range d {
					dpos[i] += g
				}
			}
		}
	})
}
