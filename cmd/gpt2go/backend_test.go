package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/dist"
)

// Which GPU a rank opens, for the ways launchers hand GPUs out.
func TestGPUOrdinal(t *testing.T) {
	rank := func(r, size, local int) dist.Env {
		return dist.Env{Rank: r, Size: size, LocalRank: local, Launcher: "slurm"}
	}
	for _, c := range []struct {
		name    string
		job     dist.Env
		visible int
		want    int
		err     string // a part of the error, "" for none
	}{
		{"one process, one GPU", dist.Env{}, 1, 0, ""},
		{"one process, 8 GPUs", dist.Env{}, 8, 0, ""},
		{"torchrun x8 on 8 GPUs", rank(5, 8, 5), 8, 5, ""},
		{"two nodes x8: local rank picks", rank(13, 16, 5), 8, 5, ""},
		{"srun --gpus-per-task=1: each rank sees its one GPU", rank(7, 8, 7), 1, 0, ""},
		{"srun --gpus-per-task=1, node 2", rank(13, 16, 5), 1, 0, ""},
		{"fewer GPUs than local ranks", rank(3, 8, 3), 2, 0, "rank 3 of 8: local rank 3 on its node, but the driver sees 2 GPUs (0..1): start at most 2 ranks per node"},
		{"no GPU", rank(1, 2, 1), 0, 0, "rank 1 of 2: the CUDA driver sees no GPU"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := gpuOrdinal(c.job, c.visible)
			switch {
			case c.err == "" && (err != nil || got != c.want):
				t.Fatalf("gpuOrdinal = %d, %v; want %d", got, err, c.want)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("error %v, want one line containing %q", err, c.err)
			}
		})
	}
}

// --device auto falls back to the CPU when this process's GPU fails, but not one rank alone of a
// job whose other ranks may have theirs: that rank says why instead.
func TestDeviceAutoRankDoesNotFallBackAlone(t *testing.T) {
	oldVisible, oldNew := visibleGPUs, newCUDA
	t.Cleanup(func() { visibleGPUs, newCUDA = oldVisible, oldNew })
	visibleGPUs = func() (int, error) { return 2, nil }
	var opened []int
	newCUDA = func(opts cuda.Options) (*cuda.Backend, error) {
		opened = append(opened, opts.Device)
		return nil, errors.New("cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")
	}
	var stderr bytes.Buffer
	one := deviceFlags{device: "auto", threads: 1}
	if be, err := one.openDevice(&stderr); err != nil || be.Name() == "" || !strings.Contains(stderr.String(), "no usable GPU: cuDevicePrimaryCtxRetain failed") {
		t.Fatalf("one process: %v, stderr %q; want the CPU with the reason", err, stderr.String())
	}
	stderr.Reset()
	rank1 := deviceFlags{device: "auto", threads: 1, job: dist.Env{Rank: 1, Size: 2, LocalRank: 1, Launcher: "torchrun"}}
	_, err := rank1.openDevice(&stderr)
	want := "rank 1 of 2: --device auto: GPU 1 of the 2 the driver sees: cuDevicePrimaryCtxRetain failed"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "does not fall back to the CPU alone") ||
		strings.Contains(err.Error(), "\n") || stderr.Len() != 0 {
		t.Fatalf("rank 1 of 2: error %v, stderr %q; want one line starting %q", err, stderr.String(), want)
	}
	if len(opened) != 2 || opened[1] != 1 {
		t.Errorf("opened GPUs %v, want the local rank's, 1, second", opened)
	}
}

// --device auto: a rank of a job whose CUDA driver loads but sees no GPU (CUDA_VISIBLE_DEVICES
// pointing past the node's GPUs) fails in one line naming it, as the other ranks may have theirs;
// without the driver (a CPU machine) every rank takes the CPU, as one process does.
func TestDeviceAutoRankWithDriverButNoGPU(t *testing.T) {
	oldVisible, oldNew := visibleGPUs, newCUDA
	t.Cleanup(func() { visibleGPUs, newCUDA = oldVisible, oldNew })
	newCUDA = func(opts cuda.Options) (*cuda.Backend, error) {
		t.Fatalf("opened GPU %d, but none is visible", opts.Device)
		return nil, nil
	}
	noDevice := fmt.Errorf("%w (is an NVIDIA GPU present and the driver loaded? nvidia-smi should list it)",
		&cuda.Error{Call: "cuInit", Name: "CUDA_ERROR_NO_DEVICE", Text: "no CUDA-capable device is detected", Code: 100})
	noDriver := &cuda.LibError{What: "the CUDA driver (libcuda)", Tried: []string{"libcuda.so.1"}}
	rank3 := dist.Env{Rank: 3, Size: 4, LocalRank: 3, Launcher: "openmpi"}
	for _, c := range []struct {
		name    string
		job     dist.Env
		visible int
		err     error
		want    string // a part of the one-line error; "" for the CPU
	}{
		{"rank, driver sees 0 GPUs", rank3, 0, nil, "rank 3 of 4: --device auto: the CUDA driver loads but this rank sees no usable GPU (the CUDA driver sees no GPU)"},
		{"rank, cuInit: no device", rank3, 0, noDevice, "rank 3 of 4: --device auto: the CUDA driver loads but this rank sees no usable GPU (cuInit failed: CUDA_ERROR_NO_DEVICE"},
		{"rank, no driver", rank3, 0, noDriver, ""},
		{"one process, driver sees 0 GPUs", dist.Env{}, 0, nil, ""},
		{"one process, cuInit: no device", dist.Env{}, 0, noDevice, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			visibleGPUs = func() (int, error) { return c.visible, c.err }
			var stderr bytes.Buffer
			d := deviceFlags{device: "auto", threads: 1, job: c.job}
			be, err := d.openDevice(&stderr)
			if c.want == "" {
				if err != nil || !strings.Contains(stderr.String(), "(no usable GPU: ") {
					t.Fatalf("error %v, stderr %q; want the CPU with the reason", err, stderr.String())
				}
				if _, onGPU := be.(*cuda.Backend); onGPU {
					t.Fatal("a GPU backend")
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) || !strings.Contains(err.Error(), "check CUDA_VISIBLE_DEVICES") ||
				strings.Contains(err.Error(), "\n") || stderr.Len() != 0 {
				t.Fatalf("error %v, stderr %q; want one line starting %q", err, stderr.String(), c.want)
			}
		})
	}
}
