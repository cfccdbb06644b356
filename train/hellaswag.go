package train

import (
	"context"
	"fmt"

	"github.com/gpt2go/gpt2go/eval"
)

// hellaSwag scores the training model on the first HellaSwagLimit items of a HellaSwag file
// every HellaSwagEvery steps. It runs the model forward only, between steps, with no RNG and
// no data loader, so it cannot change the training trajectory. The window is the training
// sequence length (the model is planned for BatchSize x SeqLen): longer items have their context
// cut from the left, and items with an ending longer than SeqLen are skipped.
type hellaSwag struct {
	items  []eval.Rendered
	scorer *eval.Scorer
	noted  bool // the truncations and skips were reported (they are the same every time)
}

// openHellaSwag reads and tokenizes the items; it needs the model built.
func (t *Trainer) openHellaSwag() error {
	cfg := t.cfg
	if cfg.HellaSwagEvery <= 0 {
		return nil
	}
	if t.text == nil {
		return fmt.Errorf("--eval-hellaswag-every needs the data's tokenizer, and %s records none (no meta.json)", cfg.Data)
	}
	items, err := eval.ReadHellaSwag(cfg.HellaSwag, cfg.HellaSwagLimit)
	if err != nil {
		return err
	}
	t.hellaswag = &hellaSwag{
		items:  eval.Render(items, t.text.tok),
		scorer: &eval.Scorer{Model: t.model, Rows: cfg.BatchSize, Window: cfg.SeqLen},
	}
	return nil
}

// evalHellaSwag scores the items at step and logs hellaswag_acc and hellaswag_acc_norm.
// Cancelling ctx (Ctrl-C) cuts it short: nothing is logged, and the run stops at once.
func (t *Trainer) evalHellaSwag(ctx context.Context, step int) error {
	h := t.hellaswag
	res, err := h.scorer.Run(ctx, h.items, nil)
	if err != nil && ctx.Err() != nil {
		t.bar.Println("step %d: %v, not logged", step, err)
		t.cutShort = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	t.writeLog(map[string]any{"step": step, "hellaswag_acc": res.Acc, "hellaswag_acc_norm": res.AccNorm})
	line := fmt.Sprintf("step %*d/%d | hellaswag acc %.4f | acc_norm %.4f | n %d", len(fmt.Sprint(t.cfg.Steps)), step, t.cfg.Steps, res.Acc, res.AccNorm, res.N)
	if note := res.Summary(); note != "" && !h.noted {
		line += " (" + note + ")"
		h.noted = true
	}
	t.bar.Println("%s", line)
	return nil
}
