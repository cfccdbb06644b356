package cuda

import (
	"io"

	"github.com/gpt2go/gpt2go/backend"
)

// reserveBytes is kept free beyond the model's plan: cuBLASLt's workspace is already allocated,
// but kernel scratch (layernorm and bias-gradient partial sums, attention's delta), the CUDA
// context's own growth and the peak-FLOPS measurement (3 x 64 MiB) need room.
const reserveBytes = 512 << 20

// CheckMemory compares the model's plan with the GPU's free memory before anything is allocated.
func (be *Backend) CheckMemory(plan []backend.MemoryItem) error {
	free, total, err := be.g.MemInfo()
	if err != nil {
		return err
	}
	return checkPlan(plan, free, total, be.opts.Verbose)
}

// MemoryBudget is the GPU's free and total memory now, less the scratch reserve.
func (be *Backend) MemoryBudget() (backend.MemoryBudget, error) {
	free, total, err := be.g.MemInfo()
	return gpuBudget(free, total), err
}

func gpuBudget(free, total int64) backend.MemoryBudget {
	return backend.MemoryBudget{Place: "on the GPU", Free: free, Total: total, Reserve: reserveBytes, ReserveFor: "scratch"}
}

// checkPlan is CheckMemory's decision, given the free and total bytes; it reports the plan to
// verbose when that is set.
func checkPlan(plan []backend.MemoryItem, free, total int64, verbose io.Writer) error {
	return backend.CheckPlan(plan, gpuBudget(free, total), verbose)
}

var _ backend.MemoryChecker = (*Backend)(nil)
var _ backend.MemoryBudgeter = (*Backend)(nil)
