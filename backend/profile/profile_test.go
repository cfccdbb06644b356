package profile

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// passThrough are the backend.Backend methods the wrapper deliberately leaves to the wrapped
// backend: they allocate or wait and do no work worth timing inside a step.
var passThrough = map[string]bool{"Alloc": true, "AllocInt32": true, "View": true, "Sync": true}

// Embedding the wrapped backend means a method added to backend.Backend later compiles and
// passes through untimed. This test makes that a failure: every method of the interface must be
// declared in this package with a *Backend receiver, or be listed in passThrough.
func TestWrapperOverridesEveryMethod(t *testing.T) {
	declared := map[string]bool{}
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Backend" {
					declared[fn.Name.Name] = true
				}
			}
		}
	}
	ops := reflect.TypeFor[backend.Ops]()
	for i := range ops.NumMethod() {
		name := ops.Method(i).Name
		if passThrough[name] {
			t.Errorf("op %s is listed as pass-through; ops must be timed", name)
		}
		if !declared[name] {
			t.Errorf("backend.Ops.%s is not overridden by profile.Backend: add it to ops.go with its cost in cost.go", name)
		}
	}
	all := reflect.TypeFor[backend.Backend]()
	for i := range all.NumMethod() {
		name := all.Method(i).Name
		if _, isOp := ops.MethodByName(name); !isOp && !declared[name] && !passThrough[name] {
			t.Errorf("backend.Backend.%s is neither overridden by profile.Backend nor listed in passThrough", name)
		}
	}
	if len(declared) < ops.NumMethod() {
		t.Fatalf("found only %d methods; is the parser looking at the right files?", len(declared))
	}
}

func TestMatmulCost(t *testing.T) {
	const N, C, OC = 256, 128, 384
	fwd := matmulForwardCost(N, C, OC, true)
	if fwd.Flops != 25165824 { // 2*256*128*384
		t.Errorf("matmul forward FLOPs = %v, want 2*N*C*OC = 25165824", fwd.Flops)
	}
	if want := 4.0 * (N*C + OC*C + OC + N*OC); fwd.Bytes != want {
		t.Errorf("matmul forward bytes = %v, want %v", fwd.Bytes, want)
	}
	if bwd := matmulBackwardCost(N, C, OC, true, true); bwd.Flops != 2*fwd.Flops {
		t.Errorf("matmul backward FLOPs = %v, want 4*N*C*OC = %v", bwd.Flops, 2*fwd.Flops)
	}
	if bwd := matmulBackwardCost(N, C, OC, false, true); bwd.Flops != fwd.Flops {
		t.Errorf("matmul backward without dinp: FLOPs = %v, want 2*N*C*OC = %v", bwd.Flops, fwd.Flops)
	}
	// Causal attention: B*NH heads, T(T+1)/2 pairs, two products of 2*HS FLOPs per pair.
	if got, want := attentionForwardCost(2, 4, 8, 2, backend.AttentionMask{Causal: true}).Flops, 2.0*2*10*2*2*4; got != want {
		t.Errorf("attention forward FLOPs = %v, want %v", got, want)
	}
	// Bidirectional attention: T*T pairs; padding is not counted out.
	bidirectional := backend.AttentionMask{}
	if got, want := attentionBackwardCost(2, 4, 8, 2, bidirectional).Flops, 2.0*2*16*4*2*4; got != want {
		t.Errorf("bidirectional attention backward FLOPs = %v, want %v", got, want)
	}
}

// run does a little real work on a CPU backend inside nested scopes:
//
//	outer { Zero; MatmulForward; inner { MatmulForward x2 }; SumSquares }  MatmulForward
func run(t *testing.T, p *Backend) {
	t.Helper()
	const N, C, OC = 64, 96, 80
	inp, w, bias, out := p.Alloc(N*C), p.Alloc(OC*C), p.Alloc(OC), p.Alloc(N*OC)
	host := make([]float32, max(N*C, OC*C))
	for i := range host {
		host[i] = float32(i%7) - 3
	}
	p.Upload(inp, host[:N*C])
	p.Upload(w, host[:OC*C])
	p.Begin("outer")
	p.Zero(out)
	p.MatmulForward(out, inp, w, bias, N, C, OC)
	p.Begin("inner")
	p.MatmulForward(out, inp, w, nil, N, C, OC)
	p.MatmulForward(out, inp, w, bias, N, C, OC)
	p.End()
	if s := p.SumSquares(out, N*OC); !(s > 0) {
		t.Fatalf("sum of squares %v: the ops did not run", s)
	}
	p.End()
	p.MatmulForward(out, inp, w, bias, N, C, OC)
}

func TestReport(t *testing.T) {
	p := Wrap(cpu.New(1))
	run(t, p)
	r := p.Report(false)
	rows := map[string]Row{}
	var selfPct float64
	for _, row := range r.Rows {
		rows[row.Name] = row
		selfPct += row.SelfPct
	}
	if math.Abs(selfPct-100) > 1e-9 {
		t.Errorf("self %% sums to %v, want 100", selfPct)
	}
	mm := rows["MatmulForward"]
	if mm.Calls != 4 || mm.Flops != 4*2*64*96*80 || mm.SelfMs != mm.TotalMs || mm.Kind != "op" {
		t.Errorf("MatmulForward row %+v: want 4 calls, 4*2*N*C*OC FLOPs, self = total", mm)
	}
	if rows["Upload"].Calls != 2 || rows["Zero"].Calls != 1 || rows["SumSquares"].Calls != 1 {
		t.Errorf("memory op rows wrong: %+v %+v %+v", rows["Upload"], rows["Zero"], rows["SumSquares"])
	}
	outer, inner := rows["outer"], rows["outer/inner"]
	if outer.Kind != "scope" || inner.Kind != "scope" || outer.Calls != 1 || inner.Calls != 1 {
		t.Fatalf("scope rows: %+v %+v", outer, inner)
	}
	if inner.Flops != 2*2*64*96*80 || outer.Flops != 3*2*64*96*80 {
		t.Errorf("scope FLOPs: inner %v outer %v, want the sums of their matmuls", inner.Flops, outer.Flops)
	}
	// outer's total = its self time + its children's (Zero, one matmul, inner, SumSquares).
	var children float64
	for _, e := range p.Events() {
		if e.Depth == 1 {
			children += ms(e.Dur)
		}
	}
	if d := outer.TotalMs - outer.SelfMs - children; math.Abs(d) > 1e-9 {
		t.Errorf("outer total %v - self %v != children %v", outer.TotalMs, outer.SelfMs, children)
	}
	if !(inner.TotalMs < outer.TotalMs && outer.TotalMs < r.WallMs) {
		t.Errorf("totals not nested: inner %v outer %v wall %v", inner.TotalMs, outer.TotalMs, r.WallMs)
	}
	if !sort.SliceIsSorted(r.Rows, func(i, j int) bool { return r.Rows[i].SelfMs > r.Rows[j].SelfMs }) {
		t.Error("rows are not sorted by self time")
	}

	byShape := p.Report(true)
	shapes := 0
	for _, row := range byShape.Rows {
		if row.Name == "MatmulForward" {
			shapes++
			if row.Shape != "N=64 C=96 OC=80" {
				t.Errorf("shape %q", row.Shape)
			}
		}
	}
	if shapes != 1 {
		t.Errorf("by shape: %d MatmulForward rows, want 1 (one shape)", shapes)
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MatmulForward", "[outer/inner]", "GFLOP/s", "1.97M"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "% peak") {
		t.Errorf("table without a peak has a %% peak column:\n%s", table.String())
	}
	r.PeakGFlops = 2 * mm.GFlops
	table.Reset()
	r.WriteTable(&table)
	if !strings.Contains(table.String(), "% peak") || !strings.Contains(table.String(), " 50.0%") {
		t.Errorf("table with a peak twice MatmulForward's rate lacks its 50.0%% of peak:\n%s", table.String())
	}
}

func TestTraceIsWellFormed(t *testing.T) {
	p := Wrap(cpu.New(1))
	run(t, p)
	var buf strings.Builder
	if err := p.WriteTrace(&buf, map[string]any{"model": "test"}); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			Ts, Dur       *float64
			Pid, Tid      *int
			Args          map[string]any
		} `json:"traceEvents"`
		DisplayTimeUnit string         `json:"displayTimeUnit"`
		OtherData       map[string]any `json:"otherData"`
	}
	if err := json.Unmarshal([]byte(buf.String()), &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	if tr.OtherData["model"] != "test" || tr.DisplayTimeUnit != "ms" {
		t.Errorf("metadata: %v %q", tr.OtherData, tr.DisplayTimeUnit)
	}
	type span struct{ start, end float64 }
	var stack []span
	complete := 0
	for _, e := range tr.TraceEvents {
		if e.Name == "" || e.Pid == nil || e.Tid == nil || e.Ts == nil {
			t.Fatalf("event without name, pid, tid or ts: %+v", e)
		}
		switch e.Ph {
		case "M":
			continue
		case "X":
		default:
			t.Fatalf("event %q has ph %q", e.Name, e.Ph)
		}
		complete++
		if e.Dur == nil || *e.Dur < 0 || *e.Ts < 0 {
			t.Fatalf("event %q: ts %v dur %v", e.Name, e.Ts, e.Dur)
		}
		if (e.Cat == "op") == (e.Args["path"] != nil) || (e.Cat == "op" && e.Args["N"] == nil) {
			t.Errorf("event %q (%s) args %v", e.Name, e.Cat, e.Args)
		}
		// Events on one thread must nest: each starts after the previous sibling ends, inside
		// its parent.
		s := span{*e.Ts, *e.Ts + *e.Dur}
		for len(stack) > 0 && stack[len(stack)-1].end <= s.start {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && s.end > stack[len(stack)-1].end {
			t.Errorf("event %q [%v,%v] overlaps its enclosing event [%v,%v]", e.Name, s.start, s.end, stack[len(stack)-1].start, stack[len(stack)-1].end)
		}
		stack = append(stack, s)
	}
	if want := len(p.Events()); complete != want || want != 10 {
		t.Errorf("%d complete events, want %d recorded (10)", complete, want)
	}
}

func TestResetAndMisuse(t *testing.T) {
	p := Wrap(cpu.New(1))
	run(t, p)
	p.Reset()
	if n := len(p.Events()); n != 0 {
		t.Fatalf("%d events after Reset", n)
	}
	if r := p.Report(false); len(r.Rows) != 0 || r.WallMs != 0 {
		t.Errorf("report after Reset: %+v", r)
	}
	p.Begin("open")
	for name, f := range map[string]func(){"Reset": p.Reset, "Report": func() { p.Report(false) }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s inside an open scope did not panic", name)
				}
			}()
			f()
		}()
	}
	p.End()
	defer func() {
		if recover() == nil {
			t.Error("End without Begin did not panic")
		}
	}()
	p.End()
}

func TestScopeHelper(t *testing.T) {
	p := Wrap(cpu.New(1))
	end := backend.Scope(p, "phase")
	p.Zero(p.Alloc(8))
	end()
	if ev := p.Events(); len(ev) != 2 || !ev[0].Scope || ev[0].Path != "phase" || ev[1].Depth != 1 {
		t.Errorf("events %+v", ev)
	}
	backend.Scope(cpu.New(1), "ignored")() // a backend without scopes: nothing happens
}

// BenchmarkOverhead measures what the wrapper adds to one op call: two clock readings, a Sync
// (a no-op on the CPU) and appending the event. The op is Zero of one element, so the time is
// nearly all overhead; compare the "bare" and "profiled" rows. The profiled run drops its events
// every 4096 calls, so the figure is without the cost of growing a long event list.
func BenchmarkOverhead(b *testing.B) {
	bare := cpu.New(1)
	for _, c := range []struct {
		name string
		be   backend.Backend
	}{{"bare", bare}, {"profiled", Wrap(bare)}} {
		b.Run(c.name, func(b *testing.B) {
			buf := c.be.Alloc(1)
			p, profiled := c.be.(*Backend)
			n := 0
			for b.Loop() {
				c.be.Zero(buf)
				if n++; profiled && n%4096 == 0 {
					p.Reset() // a step's worth of events, as gpt2go profile keeps per step
				}
			}
		})
	}
}
