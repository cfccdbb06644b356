package dist

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// DefaultMasterPort is rank 0's port when MASTER_PORT is not set (torchrun's default too).
const DefaultMasterPort = 29500

// IDPortEnv names the variable that sets Env.IDPort, the port rank 0 hands NCCL's id out on.
const IDPortEnv = "GPT2GO_ID_PORT"

// Env is where this process stands in a job: its rank, the world size, its rank on this node, and
// rank 0's address (where the NCCL id is served).
type Env struct {
	Rank, Size int
	LocalRank  int    // the rank among this node's processes: which GPU to use
	MasterAddr string // rank 0's host; empty when the launcher gives none (MPI across nodes without MASTER_ADDR)
	MasterPort int
	// IDPort is the port rank 0 hands NCCL's id out on (ExchangeID): MASTER_PORT, but
	// MASTER_PORT+1 under torchrun, whose agent already listens on MASTER_PORT (its TCPStore);
	// $GPT2GO_ID_PORT overrides both. 0 in a process that no launcher started.
	IDPort   int
	Launcher string // "torchrun", "openmpi", "mpich", "slurm", or "" for a single process
}

// IDAddr is MasterAddr:IDPort, where the ranks fetch NCCL's id.
func (e Env) IDAddr() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.IDPort)) }

// Distributed says whether the job has more than one process.
func (e Env) Distributed() bool { return e.Size > 1 }

// FromEnv reads the rank environment of this process; see ParseEnv.
func FromEnv() (Env, error) { return ParseEnv(os.Getenv) }

// ParseEnv reads the rank environment from getenv, trying the launchers in this order (the first
// whose variables are set wins, so mpirun or torchrun inside a SLURM allocation is read as such):
//
//   - torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (all required).
//   - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK.
//   - MPICH's (Hydra) mpiexec: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID.
//   - SLURM's srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), SLURM_LOCALID, and rank
//     0's host is the first of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST). Only inside a job
//     step (SLURM_STEP_ID set): a batch script's own shell also has SLURM_PROCID=0 and the
//     allocation's SLURM_NTASKS, and would otherwise wait for ranks that never come.
//
// For the MPI launchers and SLURM, MASTER_ADDR overrides rank 0's host, and an MPI job whose
// ranks are all on this node uses 127.0.0.1. MASTER_PORT defaults to DefaultMasterPort. With none
// of these set, the process is rank 0 of 1.
//
// NCCL's id is handed out on MASTER_PORT+1 under torchrun, not on MASTER_PORT: torchrun's agent
// serves its own TCPStore there (static rendezvous, and the workers' agent store of c10d
// rendezvous). Speaking that store's protocol instead would tie gpt2go to one PyTorch version's
// wire format (2.x's TCPStore drops a client whose first message is not its VALIDATE query, which
// 1.13 does not know), while a second port works with every agent.
func ParseEnv(getenv func(string) string) (Env, error) {
	p := envParser{getenv: getenv}
	var e Env
	switch {
	case getenv("RANK") != "" || getenv("WORLD_SIZE") != "":
		e.Launcher = "torchrun"
		e.Rank, e.Size, e.LocalRank = p.int("RANK"), p.int("WORLD_SIZE"), p.int("LOCAL_RANK")
		e.MasterAddr = p.str("MASTER_ADDR")
		e.MasterPort = p.port("MASTER_PORT", true)
	case getenv("OMPI_COMM_WORLD_RANK") != "" || getenv("OMPI_COMM_WORLD_SIZE") != "":
		e.Launcher = "openmpi"
		e.Rank, e.Size, e.LocalRank = p.int("OMPI_COMM_WORLD_RANK"), p.int("OMPI_COMM_WORLD_SIZE"), p.optInt("OMPI_COMM_WORLD_LOCAL_RANK")
		e.MasterAddr = p.mpiMaster("OMPI_COMM_WORLD_LOCAL_SIZE", e.Size)
		e.MasterPort = p.port("MASTER_PORT", false)
	case getenv("PMI_RANK") != "" || getenv("PMI_SIZE") != "":
		e.Launcher = "mpich"
		e.Rank, e.Size, e.LocalRank = p.int("PMI_RANK"), p.int("PMI_SIZE"), p.optInt("MPI_LOCALRANKID")
		e.MasterAddr = p.mpiMaster("MPI_LOCALNRANKS", e.Size)
		e.MasterPort = p.port("MASTER_PORT", false)
	case getenv("SLURM_PROCID") != "" && slurmStep(getenv):
		e.Launcher = "slurm"
		e.Rank, e.LocalRank = p.int("SLURM_PROCID"), p.optInt("SLURM_LOCALID")
		if getenv("SLURM_STEP_NUM_TASKS") != "" {
			e.Size = p.int("SLURM_STEP_NUM_TASKS")
		} else {
			e.Size = p.int("SLURM_NTASKS")
		}
		e.MasterAddr = getenv("MASTER_ADDR")
		if e.MasterAddr == "" {
			e.MasterAddr = p.slurmMaster()
		}
		e.MasterPort = p.port("MASTER_PORT", false)
	default:
		return Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort}, nil
	}
	e.IDPort = e.MasterPort
	if e.Launcher == "torchrun" {
		e.IDPort = e.MasterPort + 1
	}
	if strings.TrimSpace(getenv(IDPortEnv)) != "" {
		e.IDPort = p.port(IDPortEnv, true)
	} else if e.IDPort > 65535 {
		e.IDPort = 0 // ExchangeID says so, if the job exchanges an id at all (NCCL's)
	}
	if p.err != nil {
		return Env{}, p.err
	}
	switch {
	case e.Size < 1:
		return Env{}, fmt.Errorf("%s world size %d: it must be at least 1", e.Launcher, e.Size)
	case e.Rank < 0 || e.Rank >= e.Size:
		return Env{}, fmt.Errorf("%s rank %d is not in 0..%d (world size %d)", e.Launcher, e.Rank, e.Size-1, e.Size)
	case e.LocalRank >= e.Size:
		return Env{}, fmt.Errorf("%s local rank %d is not in 0..%d (world size %d)", e.Launcher, e.LocalRank, e.Size-1, e.Size)
	}
	return e, nil
}

// slurmStep says whether SLURM's variables describe a job step of srun, not a batch script's
// shell (which has no step id, or the batch or extern step's).
func slurmStep(getenv func(string) string) bool {
	id := getenv("SLURM_STEP_ID")
	if id == "" {
		id = getenv("SLURM_STEPID")
	}
	return id != "" && id != "4294967294" && id != "4294967291" // SLURM_BATCH_SCRIPT, SLURM_EXTERN_CONT
}

// envParser reads variables and keeps the first error, so ParseEnv reads as a list.
type envParser struct {
	getenv func(string) string
	err    error
}

func (p *envParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
	}
}

// str returns a variable that must be set.
func (p *envParser) str(name string) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		p.fail("%s is not set; the launcher sets it, or set it by hand on every rank", name)
	}
	return v
}

// int returns a variable that must be a non-negative integer.
func (p *envParser) int(name string) int {
	v := p.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		p.fail("%s=%q is not a non-negative integer", name, v)
	}
	return n
}

// optInt is int for a variable that may be unset (0 then).
func (p *envParser) optInt(name string) int {
	if strings.TrimSpace(p.getenv(name)) == "" {
		return 0
	}
	return p.int(name)
}

// port returns a TCP port, DefaultMasterPort when unset and not required.
func (p *envParser) port(name string, required bool) int {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" && !required {
		return DefaultMasterPort
	}
	if v = p.str(name); v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		p.fail("%s=%q is not a TCP port (1..65535)", name, v)
	}
	return n
}

// mpiMaster is MASTER_ADDR, or 127.0.0.1 when the launcher says that all ranks are on this node.
func (p *envParser) mpiMaster(localSizeVar string, size int) string {
	if v := strings.TrimSpace(p.getenv("MASTER_ADDR")); v != "" {
		return v
	}
	if n, err := strconv.Atoi(p.getenv(localSizeVar)); err == nil && n == size {
		return "127.0.0.1"
	}
	return ""
}

// slurmMaster is the first host of the step's (or the job's) node list.
func (p *envParser) slurmMaster() string {
	name := "SLURM_STEP_NODELIST"
	if p.getenv(name) == "" {
		name = "SLURM_JOB_NODELIST"
	}
	list := p.str(name)
	if list == "" {
		return ""
	}
	hosts, err := ExpandNodeList(list)
	if err != nil {
		p.fail("%s: %v", name, err)
		return ""
	}
	return hosts[0]
}

// maxHosts bounds ExpandNodeList, so that a typo like n[0-999999999] is an error, not a hang.
const maxHosts = 1 << 16

// ExpandNodeList expands SLURM's compressed host list: "gpu-[01-03,07],login1" is gpu-01, gpu-02,
// gpu-03, gpu-07, login1. Numbers keep the zero padding of the range's first number; a name may
// have several bracket groups ("r[1-2]n[1-2]" is r1n1, r1n2, r2n1, r2n2).
func ExpandNodeList(list string) ([]string, error) {
	var hosts []string
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '[':
				if depth++; depth > 1 {
					return nil, fmt.Errorf("node list %q: nested '[' at byte %d", list, i)
				}
				continue
			case ']':
				if depth--; depth < 0 {
					return nil, fmt.Errorf("node list %q: ']' without '[' at byte %d", list, i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("node list %q: '[' is not closed", list)
		}
		item := strings.TrimSpace(list[start:i])
		start = i + 1
		if item == "" {
			return nil, fmt.Errorf("node list %q: an empty host name", list)
		}
		expanded, err := expandHost(item, maxHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("node list %q: %v", list, err)
		}
		hosts = append(hosts, expanded...)
	}
	return hosts, nil
}

// expandHost expands one name with bracket groups into at most limit names.
func expandHost(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		return []string{item}, nil
	}
	end := open + strings.IndexByte(item[open:], ']')
	prefix, ranges, rest := item[:open], item[open+1:end], item[end+1:]
	tails, err := expandHost(rest, limit)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if lo == "" || hi == "" || errA != nil || errB != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad range %q in %q", r, item)
		}
		for n := a; n <= b; n++ {
			for _, tail := range tails {
				if len(out) >= limit {
					return nil, fmt.Errorf("more than %d hosts", maxHosts)
				}
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, tail))
			}
		}
	}
	return out, nil
}
