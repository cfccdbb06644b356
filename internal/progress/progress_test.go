package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPlainLine(t *testing.T) {
	tests := []struct {
		name       string
		total, cur int64
		unit       string
		elapsed    time.Duration
		want       string
	}{
		{"bytes", 27_400_000, 12_330_000, "bytes", 2 * time.Second, "prepare: 45.0% 12.3/27.4 MB 6.2 MB/s eta 2s"},
		{"tokens", 2000, 1000, "tok", time.Second, "prepare: 50.0% 1.0/2.0 ktok 1.0 ktok/s eta 1s"},
		{"unknown total", 0, 500, "tok", time.Second, "prepare: 500 tok 500.0 tok/s"},
		{"done", 100, 100, "", time.Second, "prepare: 100.0% 100/100 100.0/s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(&bytes.Buffer{}, tc.total, "prepare", tc.unit)
			b.current = tc.cur
			got := b.line(b.start.Add(tc.elapsed))
			if got != tc.want {
				t.Errorf("line = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlainPacing(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, 100, "job", "")
	for i := 0; i < 100; i++ {
		b.Add(1) // far faster than the 2 s pacing: no line until Finish
	}
	if out.Len() != 0 {
		t.Fatalf("printed before 2 s passed: %q", out.String())
	}
	b.lastLine = b.lastLine.Add(-3 * time.Second) // pretend 3 s passed
	b.Add(0)
	b.Println("note %d", 7)
	b.Finish()
	b.Finish()
	b.Add(5)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "job: 100.0%") || lines[1] != "note 7" {
		t.Fatalf("unexpected output %q", out.String())
	}
}

func TestFinishPrintsOnce(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, 10, "job", "")
	b.Set(10)
	b.Finish()
	b.Finish()
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("want exactly one final line, got %q", out.String())
	}
}

func TestNilWriter(t *testing.T) {
	b := New(nil, 10, "job", "bytes")
	b.Add(3)
	b.Println("x")
	b.Finish()
}

func TestQuietPlainModePrintsOnlyCallerLines(t *testing.T) {
	var buf bytes.Buffer
	b := NewQuiet(&buf, 10, "train", "steps")
	for i := range 10 {
		b.Set(int64(i + 1))
	}
	b.Println("step %d", 10)
	b.Finish()
	if got := buf.String(); got != "step 10\n" {
		t.Fatalf("quiet plain output %q, want only the caller's line", got)
	}
}
