package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// AttentionForward runs causal multi-head self-attention; see backend.Ops.
func (be *Backend) AttentionForward(out, preatt, att, qkv backend.Buf, B, T, C, NH int) {
	attentionForward(&be.pool, Floats(out), Floats(preatt), Floats(att), Floats(qkv), B, T, C, NH)
}

// AttentionBackward accumulates into dqkv(B,T,3C); dpreatt and datt are overwritten scratch.
func (be *Backend) AttentionBackward(dqkv, dpreatt, datt, dout, qkv, att backend.Buf, B, T, C, NH int) {
	attentionBackward(&be.pool, Floats(dqkv), Floats(dpreatt), Floats(datt), Floats(dout), Floats(qkv),
		Floats(att), B, T, C, NH)
}

// attentionForward: qkv(B,T,3C) holds q, k and v, each C wide and split into NH heads of
// HS = C/NH. For every batch b, head h and query t it writes
// preatt(B,NH,T,T)[b,h,t,t2] = q[t].k[t2]/sqrt(HS) and att = softmax over t2 <= t (both 0 for
// t2 > t), and out(B,T,C)[b,t,h*HS:] = sum over t2 of att[t2]*v[t2].
func attentionForward[F Float](p *pool, out, preatt, att, qkv []F, B, T, C, NH int) {
	HS := C / NH
	scale := F(1 / math.Sqrt(float64(HS)))
	p.parallelFor(B*NH*T, 4, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			t := row % T
			h := row / T % NH
			b := row / (T * NH)
			q := qkv[(b*T+t)*3*C+h*HS:][:HS]
			pre := preatt[row*T : row*T+T]
			a := att[row*T : row*T+T]

			maxScore := F(math.Inf(-1))
			for t2 := 0; t2 <= t; t2++ {
				k := qkv[(b*T+t2)*3*C+C+h*HS:][:HS]
				var dot F
				for i, qi := range q {
					dot += qi * k[i]
				}
				dot *= scale
				pre[t2] = dot
				maxScore = max(maxScore, dot)
			}
			var sum F
			for t2 := 0; t2 <= t; t2++ {
				e := F(math.Exp(float64(pre[t2] - maxScore)))
				a[t2] = e
				sum += e
			}
			inv := 1 / sum
			for t2 := 0; t2 <= t; t2++ {
				a[t2] *= inv
			}
			clear(pre[t+1:])
			clear(a[t+1:])

			o := out[(b*T+t)*C+h*HS:][:HS]
			clear(o)
			for t2 := 0; t2 <= t; t2++ {
				v := qkv[(b*T+t2)*3*C+2*C+h*HS:][:HS]
				w := a[t2]
				for i, vi := range v {
					o[i] += w * vi
				}
			}
		}
	})
}

// attentionBackward accumulates into dqkv(B,T,3C) given dout(B,T,C), the forward's qkv and
// att(B,NH,T,T); datt and dpreatt (B,NH,T,T) are scratch it overwrites. Keys and values receive
// gradient from every later query, so goroutines split the (batch, head) pairs: each owns its
// head's slice of dqkv and sums over queries in order.
func attentionBackward[F Float](p *pool, dqkv, dpreatt, datt, dout, qkv, att []F, B, T, C, NH int) {
	HS := C / NH
	scale := F(1 / math.Sqrt(float64(HS)))
	p.parallelFor(B*NH, 1, func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			b, h := bh/NH, bh%NH
			for t := range T {
				row := bh*T + t
				a := att[row*T : row*T+T]
				da := datt[row*T : row*T+T]
				dpre := dpreatt[row*T : row*T+T]
				do := dout[(b*T+t)*C+h*HS:][:HS]

				// out = att @ v: datt[t2] = dout.v[t2], dv[t2] += att[t2]*dout.
				for t2 := 0; t2 <= t; t2++ {
					v := qkv[(b*T+t2)*3*C+2*C+h*HS:][:HS]
					dv := dqkv[(b*T+t2)*3*C+2*C+h*HS:][:HS]
					w := a[t2]
					var dot F
					for i, g := range do {
						dot += g * v[i]
						dv[i] += w * g
					}
					da[t2] = dot
				}

				// Softmax: dpreatt = att * (datt - sum(att*datt)).
				var s F
				for t2 := 0; t2 <= t; t2++ {
					s += a[t2] * da[t2]
				}
				for t2 := 0; t2 <= t; t2++ {
					dpre[t2] = a[t2] * (da[t2] - s)
				}
				clear(da[t+1:])
				clear(dpre[t+1:])

				// preatt = q.k*scale: dq += dpreatt*scale*k, dk += dpreatt*scale*q.
				q := qkv[(b*T+t)*3*C+h*HS:][:HS]
				dq := dqkv[(b*T+t)*3*C+h*HS:][:HS]
				for t2 := 0; t2 <= t; t2++ {
					k := qkv[(b*T+t2)*3*C+C+h*HS:][:HS]
					dk := dqkv[(b*T+t2)*3*C+C+h*HS:][:HS]
					g := dpre[t2] * scale
					for i := range q {
						dq[i] += g * k[i]
						dk[i] += g * q[i]
					}
				}
			}
		}
	})
}
