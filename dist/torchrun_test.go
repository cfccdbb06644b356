package dist

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// torchrunChild marks this test binary started by torchrun as one rank of the exchange.
const torchrunChild = "GPT2GO_TEST_TORCHRUN_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(torchrunChild) != "" {
		if err := torchrunRank(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// torchrunRank exchanges a fresh random id as the rank torchrun's variables say, and prints it
// with whether something (the agent) listens on MASTER_PORT.
func torchrunRank() error {
	env, err := FromEnv()
	if err != nil {
		return err
	}
	agent := false
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort)), time.Second); err == nil {
		agent = true
		c.Close()
	}
	id, err := ExchangeID(env, func() ([]byte, error) {
		return []byte(rand.Text() + rand.Text() + rand.Text() + rand.Text() + rand.Text())[:IDSize], nil
	}, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("rank %d of %d: agent on MASTER_PORT %d: %v, id port %d, id %x\n", env.Rank, env.Size, env.MasterPort, agent, env.IDPort, id)
	return nil
}

// torchrun (PyTorch's launcher, `python3 -m torch.distributed.run`) starts two ranks of this test
// binary with its agent holding MASTER_PORT; they must exchange the id beside it. It skips
// without PyTorch unless GPT2GO_REQUIRE_TORCHRUN is set (Debian: apt-get install python3-torch).
func TestExchangeIDUnderTorchrun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torchrun")
	}
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} { // a python on $PATH may not see Debian's torch
		if exec.Command(p, "-c", "import torch.distributed.run").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		if os.Getenv("GPT2GO_REQUIRE_TORCHRUN") != "" {
			t.Fatal("GPT2GO_REQUIRE_TORCHRUN is set but no python3 can import torch.distributed.run")
		}
		t.Skip("no PyTorch (python3 -c 'import torch.distributed.run' failed); apt-get install python3-torch to run torchrun")
	}
	ln := listen(t) // a free port for the agent: rank 0's listener would collide with it
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	for _, c := range []struct {
		name  string
		args  []string
		agent bool // the agent's store is on MASTER_PORT
	}{
		// torch 1.13 knows only the underscore spellings; 2.x takes both.
		{"static rendezvous", []string{"--master_addr=127.0.0.1", "--master_port=" + port}, true},
		{"standalone", []string{"--standalone"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// --redirects and --tee: Debian's torch 1.13 on Python 3.11 cannot parse their default, 0.
			args := append([]string{"-m", "torch.distributed.run", "--no_python", "--nproc_per_node=2",
				"--redirects=1", "--tee=1", "--log_dir=" + t.TempDir()}, c.args...)
			cmd := exec.Command(python, append(args, os.Args[0])...)
			cmd.Env = append(os.Environ(), torchrunChild+"=1", "OMP_NUM_THREADS=1")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("torchrun: %v\n%s", err, out.String())
				}
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-done
				t.Fatalf("torchrun did not end within 2 minutes:\n%s", out.String())
			}
			lines := regexp.MustCompile(`rank (\d) of 2: agent on MASTER_PORT (\d+): (\w+), id port (\d+), id ([0-9a-f]+)`).FindAllStringSubmatch(out.String(), -1)
			if len(lines) != 2 || lines[0][5] != lines[1][5] || lines[0][1] == lines[1][1] {
				t.Fatalf("want two ranks with the same id:\n%s", out.String())
			}
			for _, l := range lines {
				masterPort, _ := strconv.Atoi(l[2])
				if idPort, _ := strconv.Atoi(l[4]); idPort != masterPort+1 {
					t.Errorf("rank %s: id port %d, want MASTER_PORT+1 = %d", l[1], idPort, masterPort+1)
				}
				if c.agent && l[3] != "true" {
					t.Errorf("rank %s: nothing listens on MASTER_PORT %s; the test no longer shows the agent's port in use", l[1], l[2])
				}
			}
			t.Logf("%s", strings.TrimSpace(out.String()))
		})
	}
}
