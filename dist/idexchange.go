package dist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// IDSize is the size of NCCL's unique id (ncclUniqueId, NCCL_UNIQUE_ID_BYTES).
const IDSize = 128

// The exchange: a rank connects to rank 0 and says hello (idMagic, its rank and the world size,
// big-endian uint32s); rank 0 answers one status byte, then the id (status 0) or a uint16-length
// message saying why not (status 1).
var idMagic = [8]byte{'g', 'p', 't', '2', 'g', 'o', 'I', 'D'}

const handshakeTimeout = 10 * time.Second // for one connection's hello and answer

// ExchangeID gives every rank the same id, made by newID on rank 0: rank 0 listens on env.IDPort
// (every interface; MASTER_PORT, or MASTER_PORT+1 under torchrun) and sends it to each other rank,
// which connects to MASTER_ADDR there, retrying until rank 0 is up. Each side gives up after timeout with a
// one-line error naming the ranks and the address. A job of one rank needs no network.
func ExchangeID(env Env, newID func() ([]byte, error), timeout time.Duration) ([]byte, error) {
	if env.Size > 1 && env.IDPort == 0 {
		return nil, fmt.Errorf("rank %d: MASTER_PORT=%d: under torchrun the NCCL id is handed out on MASTER_PORT+1, which is not a port; set %s to a free port on every rank", env.Rank, env.MasterPort, IDPortEnv)
	}
	if env.Size == 1 || env.Rank == 0 {
		id, err := newID()
		if err != nil || env.Size == 1 {
			return id, err
		}
		addr := net.JoinHostPort("", strconv.Itoa(env.IDPort))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("rank 0: cannot listen on %s to hand out the NCCL id: %v (another job on this port? set %s to a free port on every rank)", addr, err, IDPortEnv)
		}
		defer ln.Close()
		return id, ServeID(ln, id, env.Size, timeout)
	}
	if env.MasterAddr == "" {
		return nil, fmt.Errorf("rank %d: no address for rank 0: set MASTER_ADDR (and MASTER_PORT) to rank 0's host on every rank", env.Rank)
	}
	return FetchID(env.IDAddr(), env.Rank, env.Size, timeout)
}

// ServeID answers ranks 1..size-1 on ln with id, returning when each has it, or after timeout with
// an error naming the ranks that did not come. Connections that do not speak the protocol are
// dropped; a rank that gives another world size, or comes twice, is refused and ends the exchange
// with an error (two jobs on one port, or ranks started with different settings).
func ServeID(ln net.Listener, id []byte, size int, timeout time.Duration) error {
	if len(id) != IDSize {
		return fmt.Errorf("rank 0: the id is %d bytes, want %d", len(id), IDSize)
	}
	deadline := time.Now().Add(timeout)
	type result struct {
		rank int
		err  error // a refusal that ends the exchange
	}
	done := make(chan struct{}) // closed on return, so no goroutine is left blocked
	defer close(done)
	results := make(chan result)
	served := make(map[int]bool)
	claimed := make(map[int]bool) // ranks with a connection in flight or served
	accepted := make(chan net.Conn)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			select {
			case accepted <- c:
			case <-done:
				c.Close()
				return
			}
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var pending []net.Conn // connections whose hello is being read
	defer func() {
		for _, c := range pending {
			c.Close()
		}
	}()
	hellos := make(chan struct {
		c          net.Conn
		rank, size int
		err        error
	})
	for len(served) < size-1 {
		select {
		case c := <-accepted:
			pending = append(pending, c)
			go func() {
				c.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
				rank, sz, err := readHello(c)
				select {
				case hellos <- struct {
					c          net.Conn
					rank, size int
					err        error
				}{c, rank, sz, err}:
				case <-done:
				}
			}()
		case h := <-hellos:
			if h.err != nil { // not one of ours, or too slow: drop it
				h.c.Close()
				continue
			}
			var refuse string
			switch {
			case h.size != size:
				refuse = fmt.Sprintf("rank %d says the world size is %d, rank 0 has %d", h.rank, h.size, size)
			case h.rank < 1 || h.rank >= size:
				refuse = fmt.Sprintf("rank %d is not in 1..%d", h.rank, size-1)
			case claimed[h.rank]:
				refuse = fmt.Sprintf("rank %d connected twice (two jobs on one port?)", h.rank)
			}
			if refuse != "" {
				writeRefusal(h.c, refuse)
				h.c.Close()
				return fmt.Errorf("rank 0 (%s): %s", ln.Addr(), refuse)
			}
			claimed[h.rank] = true
			go func() {
				_, err := h.c.Write(append([]byte{0}, id...))
				h.c.Close()
				if err != nil {
					err = fmt.Errorf("rank 0 (%s): sending the id to rank %d: %v", ln.Addr(), h.rank, err)
				}
				select {
				case results <- result{h.rank, err}:
				case <-done:
				}
			}()
		case r := <-results:
			if r.err != nil {
				return r.err
			}
			served[r.rank] = true
		case err := <-acceptErr:
			return fmt.Errorf("rank 0 (%s): accepting ranks: %v", ln.Addr(), err)
		case <-timer.C:
			var missing []int
			for r := 1; r < size; r++ {
				if !served[r] {
					missing = append(missing, r)
				}
			}
			return fmt.Errorf("rank 0 (%s): ranks %s did not fetch the NCCL id within %v (not started, or a different MASTER_ADDR/MASTER_PORT?)",
				ln.Addr(), rankList(missing), timeout)
		}
	}
	return nil
}

// FetchID connects to rank 0 at addr as rank (of size) and returns the id, retrying the
// connection until rank 0 listens or timeout passes.
func FetchID(addr string, rank, size int, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		c, err := net.DialTimeout("tcp", addr, max(time.Until(deadline), time.Millisecond))
		if err == nil {
			id, err := fetch(c, rank, size, deadline)
			c.Close()
			var refused refusedError
			if err == nil || errors.As(err, &refused) {
				if err != nil {
					return nil, fmt.Errorf("rank %d: rank 0 at %s refused: %v", rank, addr, err)
				}
				return id, nil
			}
			last = err
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("rank %d: no NCCL id from rank 0 at %s within %v (last error: %v); is rank 0 running, with the same MASTER_ADDR, MASTER_PORT and %s on every rank?",
				rank, addr, timeout, last, IDPortEnv)
		}
		time.Sleep(min(200*time.Millisecond, max(time.Until(deadline), 0)))
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type refusedError string

func (e refusedError) Error() string { return string(e) }

func fetch(c net.Conn, rank, size int, deadline time.Time) ([]byte, error) {
	c.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
	hello := make([]byte, 0, 16)
	hello = append(hello, idMagic[:]...)
	hello = binary.BigEndian.AppendUint32(hello, uint32(rank))
	hello = binary.BigEndian.AppendUint32(hello, uint32(size))
	if _, err := c.Write(hello); err != nil {
		return nil, err
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil {
		return nil, err
	}
	if status[0] != 0 {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return nil, err
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return nil, err
		}
		return nil, refusedError(msg)
	}
	id := make([]byte, IDSize)
	if _, err := io.ReadFull(c, id); err != nil {
		return nil, err
	}
	return id, nil
}

func readHello(c net.Conn) (rank, size int, err error) {
	var b [16]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, err
	}
	if [8]byte(b[:8]) != idMagic {
		return 0, 0, errors.New("not a gpt2go rank")
	}
	return int(binary.BigEndian.Uint32(b[8:])), int(binary.BigEndian.Uint32(b[12:])), nil
}

func writeRefusal(c net.Conn, msg string) {
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	b := []byte{1}
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	c.Write(append(b, msg...))
}

// rankList writes ranks compactly: "1-3, 5".
func rankList(ranks []int) string {
	var out []byte
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if len(out) > 0 {
			out = append(out, ", "...)
		}
		out = strconv.AppendInt(out, int64(ranks[i]), 10)
		if j > i {
			out = append(out, '-')
			out = strconv.AppendInt(out, int64(ranks[j]), 10)
		}
		i = j + 1
	}
	return string(out)
}
