package cpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelsSimulated runs tools/asmsim.py on a test binary of this package (built with symbols,
// which go test's own binary lacks): it disassembles the 6x16 and
// 12x32 gemm kernels with objdump and runs their machine code in a simulator against a float64
// reference, which is how the AVX-512 kernel is checked on CPUs (and CI machines) without AVX-512.
// It skips without python3 or objdump unless GPT2GO_REQUIRE_ASMSIM=1.
func TestKernelsSimulated(t *testing.T) {
	for _, tool := range []string{"python3", "objdump", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("GPT2GO_REQUIRE_ASMSIM") == "1" {
				t.Fatalf("%s not found (GPT2GO_REQUIRE_ASMSIM=1): install python3 and binutils", tool)
			}
			t.Skipf("%s not found: cannot simulate the kernels' machine code", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "cpu.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	out, err := exec.Command("python3", "../../tools/asmsim.py", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("tools/asmsim.py: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sgemmKernel12x32") {
		t.Fatalf("tools/asmsim.py did not run the 12x32 kernel:\n%s", out)
	}
	t.Logf("%s", out)
}
