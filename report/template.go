package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"

	"github.com/gpt2go/gpt2go/backend/profile"
)

// Profile is the op profile `gpt2go profile --run RUNDIR` leaves in the run directory: its table
// and the pitfalls it named (train.ProfileResult, read as far as the report needs).
type Profile struct {
	*profile.Report
	Hints []string `json:"hints"`
}

// readProfile reads RUNDIR's profile.
func readProfile(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := Profile{Report: &profile.Report{}}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is not a profile table: %v; run `gpt2go profile` again", path, err)
	}
	return &r, nil
}

var funcs = template.FuncMap{
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2": func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"rate": func(r profile.Row) string {
		switch {
		case r.GFlops > 0:
			return fmt.Sprintf("%.1f GFLOP/s", r.GFlops)
		case r.GBps > 0:
			return fmt.Sprintf("%.2f GB/s", r.GBps)
		}
		return ""
	},
	"gflop": func(v float64) string {
		if v == 0 {
			return ""
		}
		return fmt.Sprintf("%.3f", v/1e9)
	},
}

// The page is plain HTML and CSS with the charts inline; the one script only counts what rendered
// (charts and pictures) into the page title, which the headless-browser test reads.
var pageTemplate = template.Must(template.New("report").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpt2go report: {{.Title}}</title>
<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; background: #f5f6f8; color: #1d2330; }
header { background: #1d2330; color: #fff; padding: 18px 32px; }
header h1 { margin: 0; font-size: 22px; }
header p { margin: 4px 0 0; color: #b9c0cf; font-size: 13px; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 32px 48px; }
section { background: #fff; border-radius: 8px; box-shadow: 0 1px 3px rgba(0,0,0,.08); padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 17px; margin: 0 0 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: #f0f3f8; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .k { font-size: 12px; color: #5b6478; }
.card .v { font-size: 18px; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { flex: 0 1 540px; } .chart svg { width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 3px 10px; border-bottom: 1px solid #e6e9ef; text-align: left; }
th { background: #f0f3f8; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { white-space: pre-wrap; background: #f7f7f9; padding: 8px 10px; border-radius: 4px; font-size: 12px; max-height: 260px; overflow: auto; }
details summary { cursor: pointer; font-weight: 600; margin: 6px 0; }
.notes li { color: #5b6478; font-size: 13px; }
img.attn { max-width: 100%; }
footer { color: #8a93a6; font-size: 12px; text-align: center; }
</style>
</head>
<body>
<header><h1>{{.Title}}</h1><p>{{.RunDir}} · report generated {{.Generated}}{{if .Version}} · gpt2go {{.Version}}{{end}}</p></header>
<main>
<section id="summary"><h2>Summary</h2><div class="cards">
{{range .Summary}}<div class="card"><div class="k">{{.Key}}</div><div class="v">{{.Value}}</div></div>
{{else}}<p>No training steps logged yet.</p>{{end}}
</div></section>

<section id="curves"><h2>Curves</h2><div class="charts">
{{range .Charts}}<div class="chart" id="{{.ID}}" title="{{.Title}}">{{.SVG}}</div>
{{end}}</div></section>

{{if .Evals}}<section id="evals"><h2>Evaluations</h2><table>
{{range .Evals}}<tr><td>{{.Key}}</td><td class="n">{{.Value}}</td></tr>{{end}}
</table></section>{{end}}

{{if .Attention}}<section id="attention"><h2>Attention maps</h2>
<p>{{.Attention.Caption}}</p><img class="attn" alt="attention maps" src="{{.Attention.DataURI}}">
</section>{{end}}

{{with .Profile}}<section id="profile"><h2>Op profile</h2>
<p>{{.Backend}}; {{f1 .WallMs}} ms recorded{{if .SyncEachOp}} (synchronised after each op){{end}}. Self time excludes children; total time includes them (scopes).</p>
<table><tr><th>name</th><th>kind</th><th>calls</th><th>self ms</th><th>total ms</th><th>self %</th><th>GFLOP</th><th>achieved</th></tr>
{{range .Rows}}<tr><td>{{.Name}}{{if .Shape}} <small>{{.Shape}}</small>{{end}}</td><td>{{.Kind}}</td><td class="n">{{.Calls}}</td><td class="n">{{f2 .SelfMs}}</td><td class="n">{{f2 .TotalMs}}</td><td class="n">{{f1 .SelfPct}}</td><td class="n">{{gflop .Flops}}</td><td class="n">{{rate .}}</td></tr>
{{end}}</table>
{{range .Hints}}<p>hint: {{.}}</p>
{{end}}</section>{{end}}

<section id="samples"><h2>Samples over time</h2>
{{range .Samples}}<details open><summary>step {{.Step}}</summary><pre>{{.Text}}</pre></details>
{{else}}<p>No samples were written (train with --sample-every N).</p>{{end}}
</section>

<section id="config"><h2>Configuration</h2><table>
{{range .Config}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}
</table></section>

{{if .Ckpts}}<section id="checkpoints"><h2>Checkpoints</h2><table>
{{range .Ckpts}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}
</table></section>{{end}}

{{if .Notes}}<section><h2>Notes</h2><ul class="notes">{{range .Notes}}<li>{{.}}</li>{{end}}</ul></section>{{end}}
<footer>written by gpt2go; this page is self-contained and works offline</footer>
</main>
<script>
window.addEventListener("load", function () {
  var charts = document.querySelectorAll(".chart svg").length;
  var imgs = document.querySelectorAll("img");
  var ok = 0;
  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });
  document.body.setAttribute("data-ready", "charts=" + charts + " images=" + ok + "/" + imgs.length);
});
</script>
</body>
</html>
`))
