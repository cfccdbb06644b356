package hf_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpt2go/gpt2go/hf"
)

// fakeHub serves the fixture as the Hub serves a repository: config.json straight from git, and
// model.safetensors (an LFS file) as a redirect that announces its size and SHA-256 in
// X-Linked-Size and X-Linked-Etag, to a CDN URL that sends the bytes.
type fakeHub struct {
	*httptest.Server
	config, weights []byte

	mu       sync.Mutex
	requests []string
	auth     []string
	etag     string // announced; the true hash unless a test changes it
	size     int64  // announced
}

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{}
	var err error
	if h.config, err = os.ReadFile(filepath.Join(fixtureDir, hf.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	if h.weights, err = os.ReadFile(filepath.Join(fixtureDir, hf.WeightsFile)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(h.weights)
	h.etag, h.size = hex.EncodeToString(sum[:]), int64(len(h.weights))
	const repo = "/openai-community/gpt2/resolve/main/"
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.requests = append(h.requests, r.URL.Path)
		h.auth = append(h.auth, r.Header.Get("Authorization"))
		etag, size := h.etag, h.size
		h.mu.Unlock()
		switch r.URL.Path {
		case repo + "config.json":
			w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef01234567"`) // a git blob id, not a sha256
			w.Header().Set("Content-Length", strconv.Itoa(len(h.config)))
			w.Write(h.config)
		case repo + "model.safetensors":
			w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
			w.Header().Set("X-Linked-Size", strconv.FormatInt(size, 10))
			w.Header().Set("ETag", `"`+etag+`"`)
			http.Redirect(w, r, "/cdn/blob-"+etag, http.StatusFound)
		default:
			if strings.HasPrefix(r.URL.Path, "/cdn/") {
				w.Header().Set("Content-Length", strconv.Itoa(len(h.weights)))
				w.Write(h.weights)
				return
			}
			http.Error(w, "Entry not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(h.Close)
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	return h
}

func (h *fakeHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.requests)
}

func (h *fakeHub) announce(etag string, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.etag, h.size = etag, size
}

func TestDownload(t *testing.T) {
	hub := newFakeHub(t)
	t.Setenv("HF_TOKEN", "hf_secret")
	cache := t.TempDir()
	var log strings.Builder
	dir, err := hf.Download(context.Background(), "hf:openai-community/gpt2", cache, &log)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "hf", "openai-community--gpt2", "main"); dir != want {
		t.Errorf("folder %s, want %s", dir, want)
	}
	for name, want := range map[string][]byte{hf.ConfigFile: hub.config, hf.WeightsFile: hub.weights} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != string(want) {
			t.Errorf("%s: %d bytes (%v), want the served %d", name, len(got), err, len(want))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the folder holds %d entries, want the 2 files and no temp files", len(entries))
	}
	if n := hub.count(); n != 3 { // config.json, the redirect, the CDN
		t.Errorf("%d requests (%v), want 3", n, hub.requests)
	}
	if hub.auth[0] != "Bearer hf_secret" {
		t.Errorf("Authorization %q; want HF_TOKEN sent", hub.auth[0])
	}
	if !strings.Contains(log.String(), "downloading model.safetensors from "+hub.URL) || !strings.Contains(log.String(), "model.safetensors: 100.0%") {
		t.Errorf("progress output %q; want the URL and a bar", log.String())
	}
	if _, err := hf.Read(dir); err != nil {
		t.Errorf("the downloaded model does not load: %v", err)
	}

	// Cached: no request at all, even with the Hub gone.
	hub.Close()
	again, err := hf.Download(context.Background(), "hf:openai-community/gpt2", cache, nil)
	if err != nil || again != dir || hub.count() != 3 {
		t.Errorf("second call: %s, %v after %d requests; want the cached folder and no request", again, err, hub.count())
	}
}

func TestDownloadRejectsBadData(t *testing.T) {
	for _, c := range []struct {
		name string
		etag func(string) string
		size func(int64) int64
		want string
	}{
		{"hash", func(string) string { return strings.Repeat("ab", 32) }, func(n int64) int64 { return n }, "sha256 is"},
		{"size", func(e string) string { return e }, func(n int64) int64 { return n + 1 }, "announced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hub := newFakeHub(t)
			good, size := hub.etag, hub.size
			hub.announce(c.etag(good), c.size(size))
			cache := t.TempDir()
			_, err := hf.Download(context.Background(), "hf:openai-community/gpt2", cache, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v; want one line mentioning %q", err, c.want)
			}
			dir := filepath.Join(cache, "hf", "openai-community--gpt2", "main")
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || entries[0].Name() != hf.ConfigFile {
				t.Errorf("after the failure the cache holds %v; want config.json only", entries)
			}
			// Once the Hub is right again, only the missing file is fetched.
			hub.announce(good, size)
			before := hub.count()
			if _, err := hf.Download(context.Background(), "hf:openai-community/gpt2", cache, nil); err != nil {
				t.Fatal(err)
			}
			if n := hub.count() - before; n != 2 {
				t.Errorf("%d requests to complete the cache, want 2 (the weights' redirect and data)", n)
			}
		})
	}
}

func TestDownloadErrors(t *testing.T) {
	hub := newFakeHub(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, c := range []struct {
		name, spec, endpoint, offline string
		want                          []string
	}{
		{"server down", "hf:openai-community/gpt2", downURL, "", []string{"cannot reach the Hugging Face Hub at " + downURL, "pass the folder: --init DIR"}},
		{"not found", "hf:nobody/nothing", hub.URL, "", []string{"not on the Hub (HTTP 404)", "hf:openai-community/gpt2"}},
		{"offline mode", "hf:openai-community/gpt2", hub.URL, "1", []string{"HF_HUB_OFFLINE", "--init DIR"}},
		{"bad name", "hf:../etc", hub.URL, "", []string{"not a Hub model"}},
		{"empty name", "hf:", hub.URL, "", []string{"not a Hub model"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HF_ENDPOINT", c.endpoint)
			t.Setenv("HF_HUB_OFFLINE", c.offline)
			before := hub.count()
			cache := t.TempDir()
			_, err := hf.Download(context.Background(), c.spec, cache, nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("not one line: %q", err)
			}
			if c.offline != "" && hub.count() != before {
				t.Errorf("HF_HUB_OFFLINE made %d requests", hub.count()-before)
			}
			if c.name == "server down" || c.name == "not found" {
				filepath.WalkDir(cache, func(path string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						t.Errorf("a failed download left %s", path)
					}
					return nil
				})
			}
		})
	}
}
