package cpu

import (
	"math"
	"testing"
)

func TestAttentionForward(t *testing.T) {
	r := newRand(7)
	B, T, C, NH := tB, tT, tC, tNH
	HS := C / NH
	qkv := randoms[float64](r, B*T*3*C)
	out := randoms[float64](r, B*T*C)
	preatt, att := randoms[float64](r, B*NH*T*T), randoms[float64](r, B*NH*T*T)
	attentionForward(testPool, out, preatt, att, qkv, B, T, C, NH)

	at := func(b, tt, part, h, i int) float64 { return qkv[(b*T+tt)*3*C+part*C+h*HS+i] }
	for b := range B {
		for h := range NH {
			for tt := range T {
				row := ((b*NH+h)*T + tt) * T
				scores := make([]float64, T)
				var sum float64
				for t2 := range T {
					if t2 > tt {
						continue
					}
					for i := range HS {
						scores[t2] += at(b, tt, 0, h, i) * at(b, t2, 1, h, i)
					}
					scores[t2] /= math.Sqrt(float64(HS))
				}
				wantAtt := make([]float64, T)
				for t2 := 0; t2 <= tt; t2++ {
					wantAtt[t2] = math.Exp(scores[t2])
					sum += wantAtt[t2]
				}
				for t2 := range wantAtt {
					wantAtt[t2] /= sum
				}
				checkClose(t, "preatt", preatt[row:row+T], scores, 1e-12)
				checkClose(t, "att", att[row:row+T], wantAtt, 1e-12)
				for i := range HS {
					var want float64
					for t2 := 0; t2 <= tt; t2++ {
						want += wantAtt[t2] * at(b, t2, 2, h, i)
					}
					checkClose(t, "out", out[(b*T+tt)*C+h*HS+i:][:1], []float64{want}, 1e-12)
				}
			}
		}
	}
}

func TestAttentionBackward(t *testing.T) {
	r := newRand(8)
	B, T, C, NH := tB, tT, tC, tNH
	qkv := randoms[float64](r, B*T*3*C)
	R := randoms[float64](r, B*T*C)
	out, preatt, att := make([]float64, B*T*C), make([]float64, B*NH*T*T), make([]float64, B*NH*T*T)
	loss := func() float64 {
		attentionForward(testPool, out, preatt, att, qkv, B, T, C, NH)
		return dot(out, R)
	}
	loss()
	dqkv0 := randoms[float64](r, len(qkv))
	dqkv := clone(dqkv0)
	// Scratch full of garbage: the op must overwrite it.
	dpreatt, datt := randoms[float64](r, len(att)), randoms[float64](r, len(att))
	attentionBackward(testPool, dqkv, dpreatt, datt, R, qkv, att, B, T, C, NH)
	checkGrad(t, "dqkv", qkv, sub(dqkv, dqkv0), loss)
}
