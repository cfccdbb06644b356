package dist

import (
	"strings"
	"testing"
	"time"
)

func TestParseEnv(t *testing.T) {
	slurm := map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
		"SLURM_STEP_NODELIST": "gpu-[01-03,07],login1", "SLURM_JOB_NODELIST": "other[1-9]"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want Env
	}{
		{"none", nil, Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: 29500}},
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node7", "MASTER_PORT": "1234"},
			Env{3, 4, 1, "node7", 1234, 1235, "torchrun"}},
		{"openmpi across nodes", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
			Env{2, 3, 0, "", 29500, 29500, "openmpi"}},
		{"openmpi on one node", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3", "MASTER_PORT": "777"},
			Env{2, 3, 2, "127.0.0.1", 777, 777, "openmpi"}},
		{"openmpi with MASTER_ADDR", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1"},
			Env{0, 2, 0, "10.0.0.1", 29500, 29500, "openmpi"}},
		{"mpich", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
			Env{1, 2, 1, "127.0.0.1", 29500, 29500, "mpich"}},
		{"slurm step", slurm, Env{5, 8, 1, "gpu-01", 29500, 29500, "slurm"}},
		{"slurm step task count", with(slurm, "SLURM_STEP_NUM_TASKS", "6"), Env{5, 6, 1, "gpu-01", 29500, 29500, "slurm"}},
		{"slurm job node list", with(slurm, "SLURM_STEP_NODELIST", ""), Env{5, 8, 1, "other1", 29500, 29500, "slurm"}},
		{"slurm MASTER_ADDR", with(slurm, "MASTER_ADDR", "head", "MASTER_PORT", "4000"), Env{5, 8, 1, "head", 4000, 4000, "slurm"}},
		{"slurm batch shell is one process", with(slurm, "SLURM_STEP_ID", ""), Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: 29500}},
		{"slurm batch step id", with(slurm, "SLURM_STEP_ID", "4294967294"), Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: 29500}},
		{"torchrun wins over slurm", with(slurm, "RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "0", "MASTER_ADDR", "a", "MASTER_PORT", "1"),
			Env{0, 2, 0, "a", 1, 2, "torchrun"}},
		{"mpirun wins over slurm", with(slurm, "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"),
			Env{1, 2, 0, "", 29500, 29500, "openmpi"}},
		{"torchrun GPT2GO_ID_PORT", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "a", "MASTER_PORT": "29500", "GPT2GO_ID_PORT": "40000"},
			Env{0, 2, 0, "a", 29500, 40000, "torchrun"}},
		{"slurm GPT2GO_ID_PORT", with(slurm, "GPT2GO_ID_PORT", "40001"), Env{5, 8, 1, "gpu-01", 29500, 40001, "slurm"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEnv(func(k string) string { return c.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseEnvErrors(t *testing.T) {
	torch := func(kv ...string) map[string]string {
		m := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"rank not a number", torch("RANK", "one"), `RANK="one" is not a non-negative integer`},
		{"negative rank", torch("RANK", "-1"), `RANK="-1" is not a non-negative integer`},
		{"rank past size", torch("RANK", "2"), "torchrun rank 2 is not in 0..1 (world size 2)"},
		{"size zero", torch("WORLD_SIZE", "0"), "torchrun world size 0: it must be at least 1"},
		{"local rank past size", torch("LOCAL_RANK", "5"), "torchrun local rank 5 is not in 0..1"},
		{"no master", torch("MASTER_ADDR", ""), "MASTER_ADDR is not set"},
		{"no port", torch("MASTER_PORT", ""), "MASTER_PORT is not set"},
		{"bad port", torch("MASTER_PORT", "70000"), `MASTER_PORT="70000" is not a TCP port (1..65535)`},
		{"missing size", map[string]string{"RANK": "0"}, "WORLD_SIZE is not set"},
		{"bad id port", torch("GPT2GO_ID_PORT", "http"), `GPT2GO_ID_PORT="http" is not a TCP port (1..65535)`},
		{"openmpi bad size", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "x"}, `OMPI_COMM_WORLD_SIZE="x" is not a non-negative integer`},
		{"mpich bad port", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", "MASTER_PORT": "0"}, `MASTER_PORT="0" is not a TCP port`},
		{"slurm no node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "3"}, "SLURM_JOB_NODELIST is not set"},
		{"slurm bad node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "3", "SLURM_STEP_NODELIST": "gpu-[03-01]"},
			`SLURM_STEP_NODELIST: node list "gpu-[03-01]": bad range "03-01"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEnv(func(k string) string { return c.env[k] })
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, c.want)
			}
		})
	}
}

// Under torchrun with MASTER_PORT=65535 the id port MASTER_PORT+1 does not exist: the job still
// parses (a CPU job exchanges no id), and the exchange, which NCCL needs, says what to set.
func TestTorchrunLastPort(t *testing.T) {
	env := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "65535"}
	e, err := ParseEnv(func(k string) string { return env[k] })
	if err != nil || e.MasterPort != 65535 || e.IDPort != 0 {
		t.Fatalf("ParseEnv: %+v, %v; want MASTER_PORT 65535 and no id port", e, err)
	}
	_, err = ExchangeID(e, nil, time.Second)
	if err == nil || !strings.Contains(err.Error(), "rank 1: MASTER_PORT=65535: under torchrun the NCCL id is handed out on MASTER_PORT+1, which is not a port; set GPT2GO_ID_PORT") {
		t.Fatalf("ExchangeID: %v", err)
	}
	env["GPT2GO_ID_PORT"] = "4000"
	if e, err := ParseEnv(func(k string) string { return env[k] }); err != nil || e.IDPort != 4000 {
		t.Fatalf("with GPT2GO_ID_PORT: %+v, %v", e, err)
	}
}

func TestExpandNodeList(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"login1", "login1"},
		{"gpu-[01-03,07],login1", "gpu-01 gpu-02 gpu-03 gpu-07 login1"},
		{"a[8-10]", "a8 a9 a10"},
		{"n[098-101]", "n098 n099 n100 n101"},
		{"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
		{"x[3],y[1,2]-ib", "x3 y1-ib y2-ib"},
		{"h1, h2", "h1 h2"},
	} {
		got, err := ExpandNodeList(c.in)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("ExpandNodeList(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "a,,b", "gpu-[01-03", "gpu-01]", "a[[1]]", "a[]", "a[1-]", "a[x]", "a[5-2]", "a[0-999999999]"} {
		if got, err := ExpandNodeList(bad); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("ExpandNodeList(%q) = %v, %v; want a one-line error", bad, got, err)
		}
	}
}

func TestShard(t *testing.T) {
	for _, c := range []struct {
		n, size int
		want    [][2]int // off, count per rank
	}{
		{12, 3, [][2]int{{0, 4}, {4, 4}, {8, 4}}},
		{10, 3, [][2]int{{0, 4}, {4, 4}, {8, 2}}},
		{10, 4, [][2]int{{0, 3}, {3, 3}, {6, 3}, {9, 1}}},
		{4, 3, [][2]int{{0, 2}, {2, 2}, {4, 0}}},
		{1, 2, [][2]int{{0, 1}, {1, 0}}},
		{0, 2, [][2]int{{0, 0}, {0, 0}}},
	} {
		total := 0
		for r, w := range c.want {
			off, count := Shard(c.n, c.size, r)
			if off != w[0] || count != w[1] {
				t.Errorf("Shard(%d, %d, %d) = %d, %d; want %d, %d", c.n, c.size, r, off, count, w[0], w[1])
			}
			total += count
		}
		if total != c.n || Padded(c.n, c.size)%c.size != 0 || Padded(c.n, c.size) < c.n || Padded(c.n, c.size)-c.n >= c.size {
			t.Errorf("n=%d size=%d: shards cover %d, Padded %d", c.n, c.size, total, Padded(c.n, c.size))
		}
	}
}
