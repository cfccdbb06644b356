package main

import (
	"bytes"
	"errors"
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
