package train

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/tensorboard"
)

// tensorBoardTags names the JSONL log's keys in TensorBoard, grouped into sections by the part
// before the "/". A key not listed here still reaches TensorBoard (see tensorBoardTag).
var tensorBoardTags = map[string]string{
	"loss":      "train/loss",
	"lr":        "train/lr",
	"grad_norm": "train/grad_norm",
	"val_loss":  "val/loss",
	// BERT's masked-token accuracy, train and val.
	"acc":     "train/masked_acc",
	"val_acc": "val/masked_acc",
	"tok_s":   "perf/tok_per_s",
	"mfu":     "perf/mfu",
	"ms":      "perf/ms_per_step",
	// With mixed precision the trainer logs its dynamic loss scale as "loss_scale" in the step's
	// entry; it then appears here with no further change.
	"loss_scale": "train/loss_scale",
}

// tensorBoardTag is the tag of a log key: from the table, else "<group>/<rest>" for a key with
// an underscore ("hellaswag_acc" -> "hellaswag/acc"), else "train/<key>".
func tensorBoardTag(key string) string {
	if tag, ok := tensorBoardTags[key]; ok {
		return tag
	}
	if group, rest, ok := strings.Cut(key, "_"); ok && group != "" && rest != "" {
		return group + "/" + rest
	}
	return "train/" + key
}

// openTensorBoard starts this session's events file. Its SessionLog START at the first step to
// come makes TensorBoard drop points that an earlier session logged after the checkpoint this
// one resumed from, as truncateLog does for log.jsonl.
func (t *Trainer) openTensorBoard() error {
	tb, err := tensorboard.Create(t.opts.RunDir)
	if err != nil {
		return fmt.Errorf("%w (or pass --tensorboard=false)", err)
	}
	t.tb = tb
	t.tensorBoardDone(tb.Restart(int64(t.state.Step + 1)))
	return nil
}

// logTensorBoard writes every number of a log entry (all keys but "step") as a scalar at the
// entry's step, in one event.
func (t *Trainer) logTensorBoard(entry map[string]any) {
	if t.tb == nil {
		return
	}
	step, ok := entry["step"].(int)
	if !ok {
		return
	}
	var values []tensorboard.Scalar
	for key, v := range entry {
		var x float64
		switch v := v.(type) {
		case float64:
			x = v
		case float32:
			x = float64(v)
		case int:
			x = float64(v)
		case int64:
			x = float64(v)
		default:
			continue
		}
		if key != "step" {
			values = append(values, tensorboard.Scalar{Tag: tensorBoardTag(key), Value: x})
		}
	}
	if len(values) == 0 {
		return
	}
	sort.Slice(values, func(i, j int) bool { return values[i].Tag < values[j].Tag })
	t.tensorBoardDone(t.tb.Scalars(int64(step), values))
}

// tensorBoardDone handles a write's error: TensorBoard output is a view of the run, so a failure
// (a full disk) turns it off with a warning rather than stopping the training.
func (t *Trainer) tensorBoardDone(err error) {
	if err == nil || t.tb == nil {
		return
	}
	if t.bar != nil {
		t.bar.Println("warning: TensorBoard output stopped: %v", err)
	} else {
		fmt.Fprintf(t.out, "warning: TensorBoard output stopped: %v\n", err)
	}
	t.tb.Close()
	t.tb = nil
}
