package dist

import (
	"fmt"
	"os"
	"time"
)

// Watch calls f, which waits on other ranks. When f has not returned after timeout (0: wait
// forever) a peer has died or hung, and nothing can interrupt a collective in flight: Watch writes
// one line naming this rank (the one that waited: a collective does not say which peer is
// missing) and what timed out to stderr and ends the process with ExitTimeout, which makes the
// launcher (mpirun, torchrun, srun) end the other ranks.
func Watch(rank int, what string, timeout time.Duration, f func() error) error {
	if timeout <= 0 {
		return f()
	}
	t := time.AfterFunc(timeout, func() {
		fmt.Fprintf(os.Stderr, "rank %d: %s did not finish within %v (a rank died or hangs); ending the job\n", rank, what, timeout)
		exit(ExitTimeout)
	})
	defer t.Stop()
	return f()
}
