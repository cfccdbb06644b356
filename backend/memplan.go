package backend

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// MemoryBudget is what a backend may allocate: Free bytes now, out of Total, as the device or the
// operating system reports them. Place names the memory in messages ("on the GPU", "in host
// memory"); Detail, when set, says which limit set Free (for example "RLIMIT_AS 6.00 GiB").
// Reserve is kept free beyond the plan for scratch the plan does not count.
type MemoryBudget struct {
	Place          string
	Free, Total    int64
	Reserve        int64
	ReserveFor     string // what the reserve is for, e.g. "scratch"
	Detail         string
	TooSmallAdvice string // optional extra advice appended to the error
}

// CheckPlan is the one decision behind every backend's CheckMemory: the plan's bytes plus the
// reserve must fit in the free bytes. It reports the plan, category by category, to verbose when
// that is not nil, and returns a one-line error that names what is needed, what is free and what
// to change when the plan does not fit.
func CheckPlan(plan []MemoryItem, b MemoryBudget, verbose io.Writer) error {
	var need int64
	var parts []string
	for _, it := range plan {
		need += it.Bytes
		parts = append(parts, fmt.Sprintf("%s %s", it.Name, FormatBytes(it.Bytes)))
	}
	detail := ""
	if b.Detail != "" {
		detail = " (" + b.Detail + ")"
	}
	if verbose != nil {
		fmt.Fprintf(verbose, "memory plan %s: %s; total %s + %s reserve; %s of %s free%s\n",
			b.Place, strings.Join(parts, ", "), FormatBytes(need), FormatBytes(b.Reserve),
			FormatBytes(b.Free), FormatBytes(b.Total), detail)
	}
	if need+b.Reserve <= b.Free {
		return nil
	}
	reserve := ""
	if b.Reserve > 0 {
		reserve = fmt.Sprintf(" plus %s of %s", FormatBytes(b.Reserve), b.ReserveFor)
	}
	return &PlanError{
		Text: fmt.Sprintf("the model needs %s %s (%s)%s, but only %s of %s are free%s",
			FormatBytes(need), b.Place, strings.Join(parts, ", "), reserve, FormatBytes(b.Free), FormatBytes(b.Total), detail),
		Advice: "use a smaller --batch-size with --grad-accum to keep the tokens per step, a shorter --seq-len, or a smaller model",
		Extra:  b.TooSmallAdvice,
	}
}

// PlanError is CheckPlan's refusal: what the plan needs against what is free (Text), what to
// change (Advice: training's flags, which a command with others replaces, WithAdvice), the
// budget's own advice (Extra, may be empty) and what the plan's precision costs where it costs
// more than fp32 (Note, set by the model, may be empty).
type PlanError struct {
	Text, Advice, Extra, Note string
}

func (e *PlanError) Error() string {
	msg := e.Text + "; " + e.Advice
	for _, s := range []string{e.Extra, e.Note} {
		if s != "" {
			msg += "; " + s
		}
	}
	return msg
}

// WithAdvice returns err with the advice of the PlanError in it replaced by advice (err as it
// is when it holds none): a command names its own flags.
func WithAdvice(err error, advice string) error {
	var pe *PlanError
	if !errors.As(err, &pe) {
		return err
	}
	changed := *pe
	changed.Advice = advice
	return fmt.Errorf("%s", strings.Replace(err.Error(), pe.Error(), changed.Error(), 1))
}

// FormatBytes writes a byte count in KiB, MiB or GiB, whichever reads best.
func FormatBytes(b int64) string {
	switch {
	case b < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
}
