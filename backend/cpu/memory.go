package cpu

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpt2go/gpt2go/backend"
)

// reserveBytes is kept free beyond the model's plan: the matmul packing panels and attention
// scratch (a few MiB per thread), the data loader, the Go runtime and its collector's headroom.
const reserveBytes = 256 << 20

// SetVerbose makes CheckMemory report the memory plan, category by category, to w (nil: silent).
func (be *Backend) SetVerbose(w io.Writer) { be.verbose = w }

// CheckMemory compares the model's plan with what this process may still allocate, before the
// model allocates anything: a model too big for the machine then stops with one line naming the
// limit, instead of Go's "fatal error: out of memory" and a dump of every goroutine.
func (be *Backend) CheckMemory(plan []backend.MemoryItem) error {
	b, err := be.MemoryBudget()
	if err != nil {
		return err
	}
	return backend.CheckPlan(plan, b, be.verbose)
}

// MemoryBudget is the binding one of the host's limits on this process.
func (be *Backend) MemoryBudget() (backend.MemoryBudget, error) {
	limits, err := readHostLimits("/")
	if err != nil {
		return backend.MemoryBudget{}, err
	}
	return limits.budget(), nil
}

var _ backend.MemoryChecker = (*Backend)(nil)
var _ backend.MemoryBudgeter = (*Backend)(nil)

// hostLimit is one bound on what the process may allocate: free bytes out of total.
type hostLimit struct {
	name        string // "MemAvailable", "cgroup memory limit", "RLIMIT_AS", ...
	free, total int64
	advice      string // how to raise it, for the out-of-memory message
}

// hostLimits are the bounds that apply to this process; the smallest free one binds.
type hostLimits []hostLimit

// budget turns the binding limit into the budget that backend.CheckPlan checks the plan against.
func (ls hostLimits) budget() backend.MemoryBudget {
	bind := ls[0]
	for _, l := range ls[1:] {
		if l.free < bind.free {
			bind = l
		}
	}
	b := backend.MemoryBudget{
		Place: "in host memory", Free: bind.free, Total: bind.total,
		Reserve: reserveBytes, ReserveFor: "scratch and runtime",
		TooSmallAdvice: bind.advice,
	}
	b.Detail = "limited by " + bind.name
	if bind.name != "MemAvailable" {
		b.Detail += fmt.Sprintf(", of which %s is in use", backend.FormatBytes(bind.total-bind.free))
	}
	return b
}

// readHostLimits reads MemAvailable, the cgroup's memory limit (v1 or v2) and RLIMIT_AS /
// RLIMIT_DATA under root ("/" except in tests, which build a fake /proc and /sys). Limits that are
// not set are left out; MemAvailable is always there on Linux. On systems without /proc (other
// operating systems) it returns no error and an unlimited budget.
func readHostLimits(root string) (hostLimits, error) {
	var ls hostLimits
	meminfo, err := readKeyValues(filepath.Join(root, "proc/meminfo"))
	switch {
	case os.IsNotExist(err):
		return hostLimits{{name: "no /proc/meminfo", free: math.MaxInt64, total: math.MaxInt64}}, nil
	case err != nil:
		return nil, fmt.Errorf("read the free memory: %w", err)
	}
	avail, okA := meminfo["MemAvailable"]
	total, okT := meminfo["MemTotal"]
	if !okA || !okT {
		return nil, fmt.Errorf("read the free memory: /proc/meminfo has no MemAvailable or MemTotal")
	}
	ls = append(ls, hostLimit{name: "MemAvailable", free: avail, total: total})
	if l, ok := readCgroupLimit(root); ok {
		ls = append(ls, l)
	}
	status, err := readKeyValues(filepath.Join(root, "proc/self/status"))
	if err != nil {
		return nil, fmt.Errorf("read this process's memory use: %w", err)
	}
	for _, r := range []struct {
		resource int
		name     string
		used     string // the /proc/self/status field the limit counts
		flag     string
	}{{unix.RLIMIT_AS, "RLIMIT_AS", "VmSize", "-v"}, {unix.RLIMIT_DATA, "RLIMIT_DATA", "VmData", "-d"}} {
		limit, ok := rlimit(root, r.resource)
		if !ok {
			continue
		}
		ls = append(ls, hostLimit{
			name: fmt.Sprintf("%s %s", r.name, backend.FormatBytes(limit)), free: max(0, limit-status[r.used]), total: limit,
			advice: fmt.Sprintf("or raise the limit (ulimit %s)", r.flag),
		})
	}
	return ls, nil
}

// rlimit returns the soft limit of resource, if one is set. Tests under a fake root give limits
// without setting them on the test process:
// a file root/rlimit/<resource> holding the soft limit in bytes.
func rlimit(root string, resource int) (int64, bool) {
	if root != "/" {
		b, err := os.ReadFile(filepath.Join(root, "rlimit", strconv.Itoa(resource)))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	var rl unix.Rlimit
	if unix.Getrlimit(resource, &rl) != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > math.MaxInt64 {
		return 0, false
	}
	return int64(rl.Cur), true
}

// readCgroupLimit finds this process's memory cgroup (v2's unified hierarchy, or v1's memory
// controller) and returns its limit less what the group uses, not counting the inactive page
// cache that the kernel would reclaim first. Ancestors' limits apply too, so it walks up.
func readCgroupLimit(root string) (hostLimit, bool) {
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return hostLimit{}, false
	}
	best := hostLimit{free: math.MaxInt64}
	found := false
	consider := func(dir, limitFile, usageFile, inactiveKey string) {
		limit, ok := readInt(filepath.Join(dir, limitFile))
		if !ok || limit >= 1<<60 { // "max", or v1's page-rounded "unlimited"
			return
		}
		usage, _ := readInt(filepath.Join(dir, usageFile))
		if stat, err := readKeyValues(filepath.Join(dir, "memory.stat")); err == nil {
			usage -= min(usage, stat[inactiveKey])
		}
		if free := max(0, limit-usage); free < best.free {
			best = hostLimit{name: "the cgroup's memory limit " + backend.FormatBytes(limit), free: free, total: limit,
				advice: "or raise the container's memory limit"}
			found = true
		}
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var mount, limitFile, usageFile, inactiveKey string
		switch {
		case parts[0] == "0" && parts[1] == "":
			mount, limitFile, usageFile, inactiveKey = "sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			mount, limitFile, usageFile, inactiveKey = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
		default:
			continue
		}
		// Inside a container the group's own directory is usually the mount's root, so the
		// path from /proc/self/cgroup may not exist there: look at the root as well.
		base := filepath.Join(root, mount)
		for dir := filepath.Join(base, parts[2]); strings.HasPrefix(dir, base); dir = filepath.Dir(dir) {
			consider(dir, limitFile, usageFile, inactiveKey)
			if dir == base {
				break
			}
		}
	}
	return best, found
}

// readInt reads a file holding one integer ("max" and other words give false).
func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil
}

// readKeyValues reads "Key: value [kB]" lines (/proc/meminfo, /proc/self/status) and "key value"
// lines (memory.stat) into bytes; lines whose value is not a number are skipped.
func readKeyValues(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.Replace(sc.Text(), ":", " ", 1))
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) == 3 && fields[2] == "kB" {
			n <<= 10
		}
		kv[fields[0]] = n
	}
	return kv, sc.Err()
}
