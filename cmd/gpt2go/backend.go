package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

type deviceFlags struct {
	device  string
	threads int
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.device, "device", "auto", "compute device: auto, cpu (auto picks the CPU until a GPU backend is built in)")
	fs.IntVar(&d.threads, "threads", 0, "CPU threads (0 = all cores)")
}

// open returns the backend the flags ask for and says which one it picked.
func (d *deviceFlags) open(stderr io.Writer) (backend.Backend, error) {
	switch d.device {
	case "auto", "cpu":
		if d.threads < 0 {
			return nil, fmt.Errorf("--threads must be >= 0, got %d", d.threads)
		}
		be := cpu.New(d.threads)
		fmt.Fprintf(stderr, "device: %s\n", be.Name())
		return be, nil
	case "cuda":
		return nil, fmt.Errorf("--device cuda: this gpt2go has no CUDA backend yet; use --device cpu")
	default:
		return nil, fmt.Errorf("unknown --device %q; use auto, cpu or cuda", d.device)
	}
}
