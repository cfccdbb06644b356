package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFile(t *testing.T) {
	body := strings.Repeat("gpt2go ", 1000)
	sum := sha256.Sum256([]byte(body))
	hexSum := hex.EncodeToString(sum[:])
	mux := http.NewServeMux()
	mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write([]byte(body))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Announced", hexSum)
		http.Redirect(w, r, "/file", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	check := func(t *testing.T, dir string, wantFile bool) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		if wantFile {
			if got, err := os.ReadFile(filepath.Join(dir, "out")); err != nil || string(got) != body || len(entries) != 1 {
				t.Errorf("want exactly the complete file, have %v (%v)", entries, err)
			}
		} else if len(entries) != 0 {
			t.Errorf("a failed download left %v", entries)
		}
	}
	t.Run("redirect headers and hash", func(t *testing.T) {
		dir := t.TempDir()
		var seen []http.Header
		got, err := File(context.Background(), srv.URL+"/redirect", filepath.Join(dir, "out"), Options{
			Expect: func(h []http.Header) (Expected, error) {
				seen = h
				return Expected{Size: int64(len(body)), SHA256: h[0].Get("X-Announced")}, nil
			},
		})
		if err != nil || got != hexSum {
			t.Fatalf("sha %s, err %v", got, err)
		}
		if len(seen) != 2 || seen[0].Get("X-Announced") != hexSum {
			t.Errorf("Expect saw %d responses %v; want the redirect's headers first", len(seen), seen)
		}
		check(t, dir, true)
	})
	for _, c := range []struct {
		name string
		want Expected
		msg  string
	}{
		{"wrong size", Expected{Size: int64(len(body)) + 1}, "announced"},
		{"wrong hash", Expected{SHA256: strings.Repeat("0", 64)}, "sha256 is " + hexSum},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := File(context.Background(), srv.URL+"/file", filepath.Join(dir, "out"), Options{
				Expect: func([]http.Header) (Expected, error) { return c.want, nil },
			})
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err %v; want one mentioning %q", err, c.msg)
			}
			check(t, dir, false)
		})
	}
	t.Run("not found", func(t *testing.T) {
		dir := t.TempDir()
		_, err := File(context.Background(), srv.URL+"/missing", filepath.Join(dir, "out"), Options{})
		var he *HTTPError
		if !errors.As(err, &he) || he.Code != 404 {
			t.Errorf("err %v; want an HTTPError 404", err)
		}
		check(t, dir, false)
	})
	t.Run("stall", func(t *testing.T) {
		old := stallTimeout
		stallTimeout = 200 * time.Millisecond
		defer func() { stallTimeout = old }()
		dir := t.TempDir()
		_, err := File(context.Background(), srv.URL+"/slow", filepath.Join(dir, "out"), Options{})
		if err == nil || !strings.Contains(err.Error(), "no data for") {
			t.Errorf("err %v; want a stall error", err)
		}
		check(t, dir, false)
	})
	t.Run("progress", func(t *testing.T) {
		dir := t.TempDir()
		var log strings.Builder
		if _, err := File(context.Background(), srv.URL+"/file", filepath.Join(dir, "out"), Options{Progress: &log, Desc: "download out"}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log.String(), "download out: 100.0%") {
			t.Errorf("progress output %q; want a final line at 100%%", log.String())
		}
		check(t, dir, true)
	})
}
