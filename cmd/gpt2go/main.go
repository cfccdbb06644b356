// Command gpt2go prepares data, trains GPT-2 models, samples from them, evaluates, inspects and
// exports them.
//
//	gpt2go train    [flags]   train (default: a small model on the Go standard library's sources)
//	gpt2go prepare  [flags]   text files or directories -> token shards
//	gpt2go sample   [flags]   generate text from a checkpoint
//	gpt2go fill     [flags]   a BERT checkpoint's top-k tokens for each [MASK] of a text
//	gpt2go eval     [flags]   loss and perplexity on a dataset or text file; HellaSwag accuracy
//	gpt2go export   [flags]   write a checkpoint as an llm.c model file or a Hugging Face folder
//	gpt2go bench    [flags]   time training steps of a model config
//	gpt2go report   RUNDIR    one self-contained HTML page about a run
//	gpt2go profile  [flags]   time every op of a few training steps
//	gpt2go plot     RUNDIR... loss and learning-rate curves
//	gpt2go attn     [flags]   attention maps of a checkpoint as heatmaps
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/train"
)

const version = "0.1.0"

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"train", "train a model (default: a small model on the Go standard library's sources)", runTrain},
	{"prepare", "tokenize text files or directories into token shards", runPrepare},
	{"sample", "generate text from a checkpoint", runSample},
	{"fill", "a BERT checkpoint's top-k tokens for each [MASK] of a text", runFill},
	{"eval", "loss and perplexity on a dataset or text file; HellaSwag accuracy", runEval},
	{"export", "write a checkpoint as an llm.c model file or a Hugging Face GPT-2 folder", runExport},
	{"bench", "time training steps of a model config", runBench},
	{"report", "write a self-contained HTML page about a run", runReport},
	{"profile", "time every op of a few training steps (table, Chrome trace)", runProfile},
	{"plot", "draw loss and learning-rate curves of runs as a PNG or SVG", runPlot},
	{"attn", "draw a checkpoint's attention maps over a text as heatmaps", runAttn},
	{"version", "print the version", func(_ context.Context, args []string, stdout, _ io.Writer) error {
		if err := parse(newFlags("version"), args, stdout); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "gpt2go %s (%s, %s/%s)\ncpu matmul kernel: %s\n", version, runtime.Version(),
			runtime.GOOS, runtime.GOARCH, cpu.MatmulKernel())
		return nil
	}},
}

func main() {
	os.Exit(run(untilSignal(), os.Args[1:], os.Stdout, os.Stderr))
}

// untilSignal returns a context that Ctrl-C (SIGINT) or SIGTERM cancels, with a stopSignal as
// its cause, so that a command can stop cleanly. The first signal also restores the default
// handling: a second one ends a command that is slow to stop at once.
func untilSignal() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		signal.Stop(signals)
		cancel(stopSignal{sig})
	}()
	return ctx
}

// stopSignal is the cause of the command's context when a signal stopped the command.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return s.Signal.String() + " signal received" }

// failureCode is the exit status of a failed command: 128 + the signal's number when a signal
// stopped it (130 for Ctrl-C, as shells report a process the signal ended), else 1.
func failureCode(ctx context.Context) int {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		if n, ok := s.Signal.(syscall.Signal); ok {
			return 128 + int(n)
		}
	}
	return 1
}

// run executes one command and returns the process exit code. Every failure is one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if os.Getenv("GPT2GO_DEBUG") != "" {
				fmt.Fprintf(stderr, "%v\n%s", r, debug.Stack())
			} else {
				fmt.Fprintf(stderr, "gpt2go: internal error: %v (set GPT2GO_DEBUG=1 for a stack trace and please report it)\n", r)
			}
			code = 2
		}
	}()
	warnings, err := checkEnv(os.Environ())
	for _, w := range warnings {
		fmt.Fprintf(stderr, "gpt2go: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpt2go: %v\n", inJob(err))
		return 1
	}
	switch {
	case len(args) == 2 && args[0] == "help": // gpt2go help COMMAND: the command's -h
		args = []string{args[1], "-h"}
	case len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(stdout)
		return 0
	case args[0] == "--version" || args[0] == "-version" || args[0] == "-v":
		args[0] = "version"
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		default:
			fmt.Fprintf(stderr, "gpt2go %s: %s\n", c.name, strings.ReplaceAll(inJob(err).Error(), "\n", " "))
			return failureCode(ctx)
		}
	}
	fmt.Fprintf(stderr, "gpt2go: unknown command %q; commands: %s\n", args[0], commandNames())
	return 1
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "gpt2go %s: train GPT-2 models in Go\n\nUsage: gpt2go COMMAND [flags]   (gpt2go COMMAND -h, or gpt2go help COMMAND, lists the flags)\n\n", version)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

// newFlags makes a flag set that reports errors as values instead of printing usage.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("gpt2go "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args, printing the flag list for -h and turning bad flags into one-line errors.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return help(fs, fs.Name()+" [flags]", stdout)
	}
	if err != nil {
		return fmt.Errorf("%v (see %s -h)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with --; see %s -h)", fs.Arg(0), fs.Name())
	}
	return nil
}

// help prints the usage line, "Usage: " and synopsis, and the flags, and returns flag.ErrHelp.
func help(fs *flag.FlagSet, synopsis string, stdout io.Writer) error {
	fmt.Fprintf(stdout, "Usage: %s\n\nFlags:\n", synopsis)
	fs.SetOutput(stdout)
	fs.PrintDefaults()
	return flag.ErrHelp
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkOutputFile is train.CheckOutput for a command's output file (an image, a page, a trace),
// which also refuses a folder: the file is renamed into place once written, which failed late
// with "rename ... file exists". name is the file's usual name, for the advice.
func checkOutputFile(path, flag, name string) error {
	if err := train.CheckOutput(path, flag); err != nil {
		return err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s is a folder; name the file to write, e.g. %s %s", flag, path, flag, filepath.Join(path, name))
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}
