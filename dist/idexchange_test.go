package dist

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func testID() []byte {
	id := make([]byte, IDSize)
	for i := range id {
		id[i] = byte(i*7 + 1)
	}
	return id
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Five goroutines act as ranks; the others start before rank 0 listens, so they must retry.
func TestExchangeID(t *testing.T) {
	ln := listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // free the port for ExchangeID's own listener
	const size = 5
	ids := make([][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := size - 1; r >= 0; r-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 0 {
				time.Sleep(300 * time.Millisecond)
			}
			env := Env{Rank: r, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, IDPort: port}
			ids[r], errs[r] = ExchangeID(env, func() ([]byte, error) {
				if r != 0 {
					t.Errorf("rank %d made an id", r)
				}
				return testID(), nil
			}, 10*time.Second)
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil || !bytes.Equal(ids[r], testID()) {
			t.Errorf("rank %d: %v, id %x", r, errs[r], ids[r][:min(8, len(ids[r]))])
		}
	}
}

// Under torchrun the agent's TCPStore already listens on MASTER_PORT (static rendezvous, and
// c10d's agent store): the ranks, reading torchrun's variables, exchange the id beside it and never
// connect to it.
func TestExchangeIDBesideTorchrunAgent(t *testing.T) {
	var agent net.Listener
	var port int
	for try := 0; agent == nil; try++ { // a port P with P+1 free
		ln := listen(t)
		p := ln.Addr().(*net.TCPAddr).Port
		if next, err := net.Listen("tcp", ":"+strconv.Itoa(p+1)); err == nil {
			next.Close()
			agent, port = ln, p
		} else if try == 20 {
			t.Skip("no free port above a free port")
		}
	}
	var calls sync.WaitGroup
	strangers := 0
	calls.Add(1)
	go func() {
		defer calls.Done()
		for {
			c, err := agent.Accept()
			if err != nil {
				return
			}
			strangers++
			c.Close()
		}
	}()
	const size = 2
	ids := make([][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(size), "LOCAL_RANK": strconv.Itoa(r),
				"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
			env, err := ParseEnv(func(k string) string { return vars[k] })
			if err != nil {
				errs[r] = err
				return
			}
			ids[r], errs[r] = ExchangeID(env, func() ([]byte, error) { return testID(), nil }, 10*time.Second)
		}()
	}
	wg.Wait()
	agent.Close()
	calls.Wait()
	for r := range size {
		if errs[r] != nil || !bytes.Equal(ids[r], testID()) {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
	if strangers != 0 {
		t.Errorf("%d connections reached the agent's port", strangers)
	}
}

// A stray connection (a port scanner, a health check) does not disturb the exchange.
func TestServeIDIgnoresStrangers(t *testing.T) {
	ln := listen(t)
	done := make(chan error)
	go func() { done <- ServeID(ln, testID(), 3, 10*time.Second) }()
	for _, junk := range []string{"GET / HTTP/1.0\r\n\r\n", ""} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(junk))
		c.Close()
	}
	for r := 1; r < 3; r++ {
		id, err := FetchID(ln.Addr().String(), r, 3, 5*time.Second)
		if err != nil || !bytes.Equal(id, testID()) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestExchangeIDErrors(t *testing.T) {
	oneLine := func(t *testing.T, err error, wants ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error, want one containing %q", wants)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
	}
	t.Run("missing ranks", func(t *testing.T) {
		ln := listen(t)
		go FetchID(ln.Addr().String(), 2, 5, 5*time.Second)
		err := ServeID(ln, testID(), 5, 500*time.Millisecond)
		oneLine(t, err, "ranks 1, 3-4 did not fetch the NCCL id within 500ms", ln.Addr().String())
	})
	t.Run("no rank 0", func(t *testing.T) {
		ln := listen(t)
		addr := ln.Addr().String()
		ln.Close()
		_, err := FetchID(addr, 3, 4, 500*time.Millisecond)
		oneLine(t, err, "rank 3: no NCCL id from rank 0 at "+addr+" within 500ms", "connection refused", "MASTER_ADDR")
	})
	t.Run("world size differs", func(t *testing.T) {
		ln := listen(t)
		served := make(chan error)
		go func() { served <- ServeID(ln, testID(), 2, 5*time.Second) }()
		_, err := FetchID(ln.Addr().String(), 1, 3, 5*time.Second)
		oneLine(t, err, "rank 1: rank 0 at", "refused: rank 1 says the world size is 3, rank 0 has 2")
		oneLine(t, <-served, "rank 1 says the world size is 3, rank 0 has 2")
	})
	t.Run("rank twice", func(t *testing.T) {
		ln := listen(t)
		served := make(chan error)
		go func() { served <- ServeID(ln, testID(), 3, 5*time.Second) }()
		if _, err := FetchID(ln.Addr().String(), 1, 3, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		_, err := FetchID(ln.Addr().String(), 1, 3, 5*time.Second)
		oneLine(t, err, "rank 1 connected twice")
		oneLine(t, <-served, "rank 1 connected twice")
	})
	t.Run("no master address", func(t *testing.T) {
		_, err := ExchangeID(Env{Rank: 1, Size: 2, MasterPort: 1, IDPort: 1}, nil, time.Second)
		oneLine(t, err, "rank 1: no address for rank 0: set MASTER_ADDR")
	})
	t.Run("port taken", func(t *testing.T) {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Skip(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		_, err = ExchangeID(Env{Rank: 0, Size: 2, MasterPort: port, IDPort: port}, func() ([]byte, error) { return testID(), nil }, time.Second)
		oneLine(t, err, "rank 0: cannot listen on :"+strconv.Itoa(port), "set GPT2GO_ID_PORT to a free port")
	})
}

func TestRankList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{[]int{1}, "1"}, {[]int{1, 2, 3, 5}, "1-3, 5"}, {[]int{2, 4, 5}, "2, 4-5"}} {
		if got := rankList(c.in); got != c.want {
			t.Errorf("rankList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
