package cpu

import "testing"

func TestEncoderForward(t *testing.T) {
	r := newRand(1)
	tokens := []int32{3, 3, 0, 15, 7, 3, 9, 9, 1, 2}
	wte := randoms[float64](r, tVp*tC)
	wpe := randoms[float64](r, tT*tC)
	for _, withPos := range []bool{true, false} {
		pos := wpe
		if !withPos {
			pos = nil
		}
		out := randoms[float64](r, tB*tT*tC) // garbage that must be overwritten
		encoderForward(testPool, out, tokens, wte, pos, tB, tT, tC)
		want := make([]float64, len(out))
		for b := range tB {
			for tt := range tT {
				for c := range tC {
					v := wte[int(tokens[b*tT+tt])*tC+c]
					if withPos {
						v += wpe[tt*tC+c]
					}
					want[(b*tT+tt)*tC+c] = v
				}
			}
		}
		checkClose(t, "out", out, want, 0)
	}
}

func TestEncoderBackward(t *testing.T) {
	r := newRand(2)
	tokens := []int32{3, 3, 0, 15, 7, 3, 9, 9, 1, 3} // repeats within and across rows
	wte := randoms[float64](r, tVp*tC)
	wpe := randoms[float64](r, tT*tC)
	R := randoms[float64](r, tB*tT*tC)
	out := make([]float64, tB*tT*tC)
	loss := func() float64 {
		encoderForward(testPool, out, tokens, wte, wpe, tB, tT, tC)
		return dot(out, R)
	}
	// Start from non-zero gradients: backward must add to them.
	dwte0, dwpe0 := randoms[float64](r, len(wte)), randoms[float64](r, len(wpe))
	dwte, dwpe := clone(dwte0), clone(dwpe0)
	encoderBackward(testPool, dwte, dwpe, R, tokens, tB, tT, tC)
	checkGrad(t, "dwte", wte, sub(dwte, dwte0), loss)
	checkGrad(t, "dwpe", wpe, sub(dwpe, dwpe0), loss)

	// Without positional embeddings dwte gets the same gradient.
	dwteNoPos := clone(dwte0)
	encoderBackward(testPool, dwteNoPos, nil, R, tokens, tB, tT, tC)
	checkClose(t, "dwte without wpe", dwteNoPos, dwte, 0)
}
