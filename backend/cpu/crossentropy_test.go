package cpu

import (
	"math"
	"testing"
)

func TestCrossEntropyForward(t *testing.T) {
	r := newRand(12)
	N := tB * tT
	logits := randoms[float64](r, N*tVp)
	for i := range logits {
		logits[i] *= 5
	}
	targets := randTokens(r, N, tV)
	probs, losses := make([]float64, N*tVp), make([]float64, N)
	crossEntropyForward(testPool, losses, probs, logits, targets, N, tV, tVp)
	for n := range N {
		row := logits[n*tVp : n*tVp+tVp]
		var sum float64
		for _, x := range row[:tV] {
			sum += math.Exp(x)
		}
		want := make([]float64, tVp)
		for i, x := range row[:tV] {
			want[i] = math.Exp(x) / sum
		}
		checkClose(t, "probs", probs[n*tVp:n*tVp+tVp], want, 1e-14)
		checkClose(t, "loss", losses[n:n+1], []float64{-math.Log(want[targets[n]])}, 1e-13)
	}
}

// TestCrossEntropyBackward checks dlogits for the mean loss against finite differences; the padding
// columns do not affect the loss, so their gradient is 0.
func TestCrossEntropyBackward(t *testing.T) {
	r := newRand(13)
	N := tB * tT
	logits := randoms[float64](r, N*tVp)
	targets := randTokens(r, N, tV)
	probs, losses := make([]float64, N*tVp), make([]float64, N)
	loss := func() float64 {
		crossEntropyForward(testPool, losses, probs, logits, targets, N, tV, tVp)
		var mean float64
		for _, l := range losses {
			mean += l / float64(N)
		}
		return mean
	}
	loss()
	dlogits := randoms[float64](r, N*tVp) // garbage: backward overwrites
	crossEntropyBackward(testPool, dlogits, probs, targets, 1/float64(N), N, tV, tVp)
	checkGrad(t, "dlogits", logits, dlogits, loss)
}

// TestCrossEntropyInPlace runs probs in the logits buffer and dlogits in the probs buffer.
func TestCrossEntropyInPlace(t *testing.T) {
	r := newRand(14)
	N := tB * tT
	logits := randoms[float32](r, N*tVp)
	targets := randTokens(r, N, tV)
	probs, losses := make([]float32, N*tVp), make([]float32, N)
	crossEntropyForward(testPool, losses, probs, logits, targets, N, tV, tVp)
	dlogits := make([]float32, N*tVp)
	crossEntropyBackward(testPool, dlogits, probs, targets, 0.1, N, tV, tVp)

	buf, lossesInPlace := clone(logits), make([]float32, N)
	crossEntropyForward(testPool, lossesInPlace, buf, buf, targets, N, tV, tVp)
	checkClose(t, "probs in place", buf, probs, 0)
	checkClose(t, "losses in place", lossesInPlace, losses, 0)
	crossEntropyBackward(testPool, buf, buf, targets, 0.1, N, tV, tVp)
	checkClose(t, "dlogits in place", buf, dlogits, 0)
}
