package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestInt8 runs eval --int8 on the reference model's text: the loss within 1% of PyTorch's fp32
// one, and the weights' memory on stderr; sample --int8 generates; the other commands have no
// --int8.
func TestInt8(t *testing.T) {
	_, textLoss, _ := refExpected(t)
	code, out, errOut := gpt2go(t, "eval", "--init", refModel, "--tokenizer", "byte", "--text", refText, "--seq-len", "32", "--device", "cpu", "--int8", "--json")
	if code != 0 {
		t.Fatalf("eval --int8: exit %d: %s", code, errOut)
	}
	var text struct{ Loss float64 }
	if err := json.Unmarshal([]byte(out), &text); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("int8 loss %.5f, fp32 (PyTorch) %.5f", text.Loss, textLoss)
	if math.Abs(text.Loss-textLoss) > 0.01*textLoss || text.Loss == textLoss {
		t.Errorf("eval --int8: loss %v, fp32 %v", text.Loss, textLoss)
	}
	if !strings.Contains(errOut, "int8 weights: ") || !strings.Contains(errOut, " MB (fp32: ") {
		t.Errorf("eval --int8 does not report the weights' memory:\n%s", errOut)
	}
	mustRun(t, "sample", "--init", refModel, "--tokenizer", "byte", "--tokens", "5", "--device", "cpu", "--int8")
	mustFail(t, "flag provided but not defined: -int8", "bench", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "100",
		"--batch-size", "2", "--seq-len", "8", "--steps", "1", "--device", "cpu", "--int8")
	mustFail(t, "flag provided but not defined: -int8", "train", "--data", "nowhere", "--device", "cpu", "--int8")
}
