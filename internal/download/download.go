// Package download fetches a URL into a file the way every gpt2go download should: atomically
// (temp file, fsync, rename: a crash or a bad download never leaves a partial file under the final
// name), with a progress bar, and checked against the size and SHA-256 the server announced. The
// HellaSwag and Tiny Shakespeare downloads (prepare) and the Hugging Face Hub's (hf) use it.
package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/internal/progress"
)

// Timeouts: connecting and waiting for the response headers are bounded, and so is a stall in
// the body, but not the whole transfer, which may be gigabytes on a slow line.
const (
	connectTimeout = 30 * time.Second
	headerTimeout  = 60 * time.Second
)

// stallTimeout is how long the body may send nothing; a variable for tests.
var stallTimeout = 60 * time.Second

// Expected is what the downloaded body must be; zero values are not checked.
type Expected struct {
	Size   int64  // bytes
	SHA256 string // lower-case hex
}

// Options tune File. The zero value downloads silently and checks only the Content-Length.
type Options struct {
	// Header is sent with the first request (e.g. an Authorization header; Go drops it on a
	// redirect to another host).
	Header http.Header
	// Progress gets a progress bar labelled Desc (nil: no bar).
	Progress io.Writer
	Desc     string
	// Expect, if set, sees the headers of every response on the way, redirects first and the
	// final response last, and says what the body must be. It may return an error to refuse the
	// download before the body is read.
	Expect func(headers []http.Header) (Expected, error)
}

// HTTPError is a response with a status other than 200.
type HTTPError struct {
	URL    string
	Status string
	Code   int
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %s", e.Status) }

// File downloads url into path atomically and returns the body's SHA-256 (hex). Network failures
// are returned as they come (a *url.Error), HTTP failures as *HTTPError; a body whose size or hash
// differs from what the server announced is an error, and nothing is left at path or beside it.
func File(ctx context.Context, url, path string, opt Options) (string, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	for k, v := range opt.Header {
		req.Header[k] = v
	}
	var headers []http.Header
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			headers = append(headers, r.Response.Header)
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", &HTTPError{URL: url, Status: resp.Status, Code: resp.StatusCode}
	}
	headers = append(headers, resp.Header)
	var want Expected
	if opt.Expect != nil {
		if want, err = opt.Expect(headers); err != nil {
			return "", err
		}
	}
	if want.Size > 0 && resp.ContentLength >= 0 && resp.ContentLength != want.Size {
		return "", fmt.Errorf("the server sends %d bytes but announced %d", resp.ContentLength, want.Size)
	}
	total := resp.ContentLength
	if want.Size > 0 {
		total = want.Size
	}
	bar := progress.New(opt.Progress, total, opt.Desc, "bytes") // nil writer: no output
	body := &watchedReader{r: resp.Body, bar: bar, stall: time.AfterFunc(stallTimeout, func() {
		cancel(fmt.Errorf("no data for %v", stallTimeout))
	})}
	defer body.stall.Stop()
	hash := sha256.New()
	var sum string
	err = atomicfile.Write(path, func(w io.Writer) error {
		n, err := io.Copy(io.MultiWriter(w, hash), body)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				err = cause
			}
			return err
		}
		sum = hex.EncodeToString(hash.Sum(nil))
		switch {
		case n == 0:
			return errors.New("empty response")
		case want.Size > 0 && n != want.Size:
			return fmt.Errorf("got %d bytes, the server announced %d", n, want.Size)
		case want.SHA256 != "" && sum != strings.ToLower(want.SHA256):
			return fmt.Errorf("the data's sha256 is %s, the server announced %s", sum, want.SHA256)
		}
		return nil
	})
	bar.Finish()
	if err != nil {
		return "", err
	}
	return sum, nil
}

var transport = &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: connectTimeout}).DialContext,
	TLSHandshakeTimeout:   connectTimeout,
	ResponseHeaderTimeout: headerTimeout,
	ForceAttemptHTTP2:     true,
}

// watchedReader advances the bar and pushes back the stall deadline on every read.
type watchedReader struct {
	r     io.Reader
	bar   *progress.Bar
	stall *time.Timer
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.stall.Reset(stallTimeout)
		w.bar.Add(int64(n))
	}
	return n, err
}
