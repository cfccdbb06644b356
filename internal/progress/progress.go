// Package progress shows how far a long job (prepare, download) has come: an animated bar on a
// terminal, and plain, sparse log lines everywhere else (CI logs, files, pipes).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Plain-mode pacing: a line at most every plainMinInterval, and only after plainMinStep of the
// total or plainHeartbeat of silence, so a long job logs about ten lines, not thousands.
const (
	plainMinInterval = 2 * time.Second
	plainMinStep     = 0.10
	plainHeartbeat   = 30 * time.Second
)

// Bar reports progress towards total units. A Bar is not safe for concurrent use: call its
// methods from one goroutine only (the one that collects the workers' results).
type Bar struct {
	w     io.Writer
	total int64
	desc  string
	unit  string
	bar   *progressbar.ProgressBar // nil in plain mode

	current   int64
	start     time.Time
	lastLine  time.Time
	lastValue int64
	printed   bool
	finished  bool
	quiet     bool // plain mode prints only the caller's Println lines
}

// New returns a bar for total units of work (total <= 0: unknown) labelled desc. unit "bytes"
// shows sizes as kB/MB/GB; any other unit (e.g. "tok") is shown after the count. On a terminal
// w gets an animated bar; otherwise plain lines like
//
//	prepare: 45.0% 12.3/27.4 MB 30.1 MB/s eta 4s
func New(w io.Writer, total int64, desc, unit string) *Bar {
	if w == nil {
		w = io.Discard
	}
	b := &Bar{w: w, total: total, desc: desc, unit: unit, start: time.Now()}
	b.lastLine = b.start
	if isTerminal(w) {
		limit := total
		if limit <= 0 {
			limit = -1 // progressbar's spinner mode
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		} else {
			opts = append(opts, progressbar.OptionShowIts())
			if unit != "" {
				opts = append(opts, progressbar.OptionSetItsString(unit))
			}
		}
		b.bar = progressbar.NewOptions64(limit, opts...)
	}
	return b
}

// NewQuiet is New for jobs that log their own progress lines (training prints a line every
// few steps): on a terminal it is the same animated bar, elsewhere it prints nothing itself.
func NewQuiet(w io.Writer, total int64, desc, unit string) *Bar {
	b := New(w, total, desc, unit)
	b.quiet = true
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add advances the bar by n units.
func (b *Bar) Add(n int64) { b.Set(b.current + n) }

// Set moves the bar to n units done.
func (b *Bar) Set(n int64) {
	if b.finished {
		return
	}
	if b.bar != nil {
		b.bar.Set64(n)
		b.current = n
		return
	}
	b.current = n
	if b.quiet {
		return
	}
	now := time.Now()
	since := now.Sub(b.lastLine)
	if since < plainMinInterval {
		return
	}
	stepped := b.total > 0 && float64(n-b.lastValue) >= plainMinStep*float64(b.total)
	if stepped || since >= plainHeartbeat || b.total <= 0 {
		b.printLine(now)
	}
}

func (b *Bar) printLine(now time.Time) {
	b.lastLine, b.lastValue, b.printed = now, b.current, true
	fmt.Fprintln(b.w, b.line(now))
}

// line formats the plain-mode status line.
func (b *Bar) line(now time.Time) string {
	var s strings.Builder
	s.WriteString(b.desc)
	s.WriteString(":")
	if b.total > 0 {
		fmt.Fprintf(&s, " %.1f%%", 100*float64(b.current)/float64(b.total))
	}
	num, scale, suffix := b.scaled(max(b.current, b.total))
	if b.total > 0 {
		fmt.Fprintf(&s, " %s/%s%s", num(b.current), num(b.total), suffix)
	} else {
		fmt.Fprintf(&s, " %s%s", num(b.current), suffix)
	}
	elapsed := now.Sub(b.start).Seconds()
	if elapsed > 0 {
		rate := float64(b.current) / elapsed
		fmt.Fprintf(&s, " %.1f%s/s", rate/scale, suffix)
		if b.total > 0 && rate > 0 && b.current < b.total {
			eta := time.Duration(float64(b.total-b.current) / rate * float64(time.Second))
			fmt.Fprintf(&s, " eta %s", eta.Round(time.Second))
		}
	}
	return s.String()
}

// scaled picks a display unit for values up to v: bytes as kB/MB/GB, other units with k/M/G.
func (b *Bar) scaled(v int64) (num func(int64) string, scale float64, suffix string) {
	scale, prefix := 1.0, ""
	switch {
	case v >= 1e9:
		scale, prefix = 1e9, "G"
	case v >= 1e6:
		scale, prefix = 1e6, "M"
	case v >= 1e3:
		scale, prefix = 1e3, "k"
	}
	unit := b.unit
	if unit == "bytes" {
		unit = "B"
	}
	if suffix = prefix + unit; suffix != "" {
		suffix = " " + suffix
	}
	num = func(x int64) string {
		if scale == 1 {
			return fmt.Sprint(x)
		}
		return fmt.Sprintf("%.1f", float64(x)/scale)
	}
	return num, scale, suffix
}

// Println prints a line (format is fmt.Printf's) above the bar without corrupting it; in plain
// mode it just prints the line.
func (b *Bar) Println(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	if b.bar != nil && !b.finished {
		b.bar.Clear()
		io.WriteString(b.w, line)
		b.bar.RenderBlank()
		return
	}
	io.WriteString(b.w, line)
}

// Finish completes the bar (a final plain line, or the full bar and a newline on a terminal).
// Later calls to Add and Set do nothing; Finish may be called more than once.
func (b *Bar) Finish() {
	if b.finished {
		return
	}
	if b.bar != nil {
		if b.total > 0 {
			b.bar.Finish()
		} else {
			b.bar.Exit()
		}
	} else if !b.quiet && (!b.printed || b.current != b.lastValue) {
		b.printLine(time.Now())
	}
	b.finished = true
}
