package train

import (
	"math"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// BERT's mean loss over batches weighs each batch by its masked positions (the mean over all of
// them), and its accuracy is correct over masked; GPT-2's is the plain mean.
func TestBatchMetricsWeighsByMasked(t *testing.T) {
	// loss, correct, masked: 1 position at 2.0 and 3 at 4.0 average to 3.5 (the mean of the
	// batches' means would be 3.0).
	loss, acc := batchMetrics([]float32{2, 1, 1, 4, 2, 3}, 3)
	if loss != 3.5 || acc != 0.75 {
		t.Errorf("BERT: loss %v acc %v; want 3.5 and 0.75", loss, acc)
	}
	if loss, acc = batchMetrics([]float32{2, 0, 0, 4, 2, 3}, 3); loss != 4 || acc != 2.0/3 {
		t.Errorf("BERT, a batch masking nothing: loss %v acc %v; want 4 and 2/3", loss, acc)
	}
	if loss, acc = batchMetrics([]float32{2, 0, 0}, 3); loss != 0 || !math.IsNaN(acc) {
		t.Errorf("BERT, nothing masked: loss %v acc %v; want 0 and NaN", loss, acc)
	}
	if loss, acc = batchMetrics([]float32{2, 4}, 1); loss != 3 || !math.IsNaN(acc) {
		t.Errorf("GPT-2: loss %v acc %v; want 3 and NaN", loss, acc)
	}
}

// fixedRows is a batchReader that gives the same rows every time.
type fixedRows []int32

func (f fixedRows) Next(inputs, targets []int32) error {
	copy(inputs, f)
	copy(targets, f)
	return nil
}

// Validation masks with its own masker: batch i of an evaluation does not hide the positions that
// training's micro-batch i of step 0 hides, and every evaluation hides the same ones.
func TestBERTValidationMasksItsOwnPositions(t *testing.T) {
	const B, T = 2, 32
	cfg := bert.Config{BlockSize: T, VocabSize: 24, PaddedVocabSize: 32, NumLayers: 1, NumHeads: 2, Channels: 8}
	specials := tokenizer.Specials{PAD: 20, UNK: -1, CLS: 21, SEP: 22, MASK: 23}
	task, err := newBERTTask(cfg, specials, 7, B, T, func(maxMasked int) (*bert.Model, error) {
		return bert.NewMasked(cpu.New(1), cfg, B, T, maxMasked, gpt.Precision{}, gpt.Parallel{})
	})
	if err != nil {
		t.Fatal(err)
	}
	task.init(1)
	rows := make(fixedRows, B*(T-2))
	for i := range rows {
		rows[i] = int32(i * 7 % 20)
	}
	figs := make([]float32, 3)
	var seen [][]int32
	for _, run := range []func() error{
		func() error { return task.forward(rows, 0, 1, 1, 0) },
		func() error { return task.evalBatch(rows, 1, figs) },
		func() error { return task.evalBatch(rows, 1, figs) },
	} {
		if err := run(); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, slices.Clone(task.inputs))
	}
	if slices.Equal(seen[0], seen[1]) {
		t.Errorf("validation batch 1 is masked as training's micro-batch 1 of step 0: %v", seen[1])
	}
	if !slices.Equal(seen[1], seen[2]) {
		t.Errorf("two evaluations mask batch 1 differently:\n%v\n%v", seen[1], seen[2])
	}
}
