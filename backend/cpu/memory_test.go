package cpu

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpt2go/gpt2go/backend"
)

// fakeRoot writes files (path relative to root -> content) into a fresh directory.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	gib        = int64(1) << 30
	meminfo20G = "MemTotal:       25165824 kB\nMemFree:        20000000 kB\nMemAvailable:   20971520 kB\n"
	status1G   = "Name:\tgpt2go\nVmPeak:\t 1048576 kB\nVmSize:\t 1048576 kB\nVmData:\t  524288 kB\n"
)

// Each source of a limit is read, and the smallest free one binds: MemAvailable alone, a cgroup v1
// limit found at the mount's root (as inside a container), a cgroup v2 limit on an ancestor of the
// process's group less its usage without the inactive page cache, and RLIMIT_AS less VmSize.
func TestReadHostLimits(t *testing.T) {
	cases := []struct {
		name     string
		files    map[string]string
		wantName string
		wantFree int64
	}{
		{"meminfo only", map[string]string{
			"proc/meminfo": meminfo20G, "proc/self/status": status1G,
		}, "MemAvailable", 20 * gib},
		{"cgroup v1 at the mount root", map[string]string{
			"proc/meminfo": meminfo20G, "proc/self/status": status1G,
			"proc/self/cgroup":                           "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": strconv.FormatInt(8*gib, 10),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": strconv.FormatInt(3*gib, 10),
			"sys/fs/cgroup/memory/memory.stat":           "cache 1\ntotal_inactive_file " + strconv.FormatInt(gib, 10) + "\n",
		}, "the cgroup's memory limit 8.00 GiB", 6 * gib},
		{"cgroup v2 on an ancestor", map[string]string{
			"proc/meminfo": meminfo20G, "proc/self/status": status1G,
			"proc/self/cgroup":                         "0::/user.slice/job/task\n",
			"sys/fs/cgroup/user.slice/memory.max":      strconv.FormatInt(4*gib, 10),
			"sys/fs/cgroup/user.slice/memory.current":  strconv.FormatInt(gib, 10),
			"sys/fs/cgroup/user.slice/job/memory.max":  "max\n",
			"sys/fs/cgroup/user.slice/job/memory.stat": "anon 1\n",
			"sys/fs/cgroup/user.slice/memory.stat":     "inactive_file 0\n",
		}, "the cgroup's memory limit 4.00 GiB", 3 * gib},
		{"RLIMIT_AS", map[string]string{
			"proc/meminfo": meminfo20G, "proc/self/status": status1G,
			"rlimit/" + strconv.Itoa(unix.RLIMIT_AS): strconv.FormatInt(6*gib, 10),
		}, "RLIMIT_AS 6.00 GiB", 5 * gib},
		{"RLIMIT_DATA", map[string]string{
			"proc/meminfo": meminfo20G, "proc/self/status": status1G,
			"rlimit/" + strconv.Itoa(unix.RLIMIT_DATA): strconv.FormatInt(2*gib, 10),
		}, "RLIMIT_DATA 2.00 GiB", 2*gib - gib/2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls, err := readHostLimits(fakeRoot(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			b := ls.budget()
			if b.Free != c.wantFree || !strings.Contains(b.Detail, "limited by "+c.wantName) {
				t.Fatalf("budget %+v, want %s binding with %d free", b, c.wantName, c.wantFree)
			}
		})
	}
}

func TestReadHostLimitsErrors(t *testing.T) {
	if _, err := readHostLimits(fakeRoot(t, map[string]string{"proc/meminfo": "MemTotal: 1 kB\n"})); err == nil ||
		!strings.Contains(err.Error(), "MemAvailable") {
		t.Errorf("meminfo without MemAvailable: err = %v", err)
	}
	ls, err := readHostLimits(t.TempDir()) // no /proc at all
	if err != nil || ls.budget().Free < 1<<62 {
		t.Errorf("without /proc: %v, %+v; want an unlimited budget", err, ls)
	}
}

// A plan that does not fit under RLIMIT_AS is refused in one line that names the limit, how
// much the model needs and what to change, before anything is allocated.
func TestCheckMemoryMessage(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/meminfo": meminfo20G, "proc/self/status": status1G,
		"rlimit/" + strconv.Itoa(unix.RLIMIT_AS): strconv.FormatInt(6*gib, 10),
	})
	ls, err := readHostLimits(root)
	if err != nil {
		t.Fatal(err)
	}
	plan := []backend.MemoryItem{{Name: "parameters", Bytes: 2 * gib}, {Name: "activations", Bytes: 4 * gib}}
	var verbose bytes.Buffer
	err = backend.CheckPlan(plan, ls.budget(), &verbose)
	if err == nil {
		t.Fatal("6 GiB of plan cannot fit 5 GiB free")
	}
	for _, want := range []string{"needs 6.00 GiB in host memory", "parameters 2.00 GiB", "5.00 GiB of 6.00 GiB are free",
		"RLIMIT_AS 6.00 GiB", "--batch-size", "ulimit -v"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	if !strings.Contains(verbose.String(), "memory plan in host memory: parameters 2.00 GiB") {
		t.Errorf("verbose report %q", verbose.String())
	}
	small := []backend.MemoryItem{{Name: "parameters", Bytes: gib}}
	if err := backend.CheckPlan(small, ls.budget(), nil); err != nil {
		t.Errorf("1 GiB + reserve should fit 5 GiB: %v", err)
	}
}

// On this machine the real limits read without error and leave room for a small model.
func TestCheckMemoryHere(t *testing.T) {
	be := New(1)
	if err := be.CheckMemory([]backend.MemoryItem{{Name: "parameters", Bytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
}
