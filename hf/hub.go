package hf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpt2go/gpt2go/internal/download"
)

// SpecPrefix marks an --init argument as a Hub repository: hf:OWNER/NAME[@REVISION].
const SpecPrefix = "hf:"

// DefaultEndpoint is the Hub; $HF_ENDPOINT (as huggingface_hub reads it) replaces it, e.g. with
// a mirror.
const DefaultEndpoint = "https://huggingface.co"

// The Hub answers a resolve request for a file stored in LFS with a redirect whose headers give
// the file's size and SHA-256 (the LFS object id); huggingface_hub reads the same headers.
const (
	headerLinkedSize = "X-Linked-Size"
	headerLinkedEtag = "X-Linked-Etag"
)

// repoName is a Hub model id: NAME (legacy, e.g. gpt2) or OWNER/NAME.
var repoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$`)

// sha256Hex is what an LFS etag looks like once its quotes are gone.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Endpoint is the Hub's base URL: $HF_ENDPOINT or DefaultEndpoint.
func Endpoint() string {
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		return strings.TrimRight(e, "/")
	}
	return DefaultEndpoint
}

// Download resolves spec, hf:OWNER/NAME[@REVISION], to a local folder holding the repository's
// config.json and model.safetensors, downloading them into cacheDir/hf/OWNER--NAME/REVISION the
// first time (with progress bars on progress, which may be nil) and making no request at all
// when both are there. Each file is checked against the size and SHA-256 the Hub announces and
// appears in the folder only once complete. $HF_TOKEN, if set, is sent for gated or private
// repositories; with $HF_HUB_OFFLINE=1 only the cache is used.
func Download(ctx context.Context, spec, cacheDir string, progress io.Writer) (string, error) {
	repo, rev, err := parseSpec(spec)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, "hf", strings.ReplaceAll(repo, "/", "--"), strings.ReplaceAll(rev, "/", "--"))
	files := []string{ConfigFile, WeightsFile}
	var missing []string
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return dir, nil
	}
	offline := fmt.Sprintf("download config.json and model.safetensors of %s elsewhere and pass the folder: --init DIR", repo)
	if v := os.Getenv("HF_HUB_OFFLINE"); v != "" && v != "0" && !strings.EqualFold(v, "false") {
		return "", fmt.Errorf("%s is not in the cache (%s) and HF_HUB_OFFLINE is set; unset it, or %s", spec, dir, offline)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hf cache: %w", err)
	}
	endpoint := Endpoint()
	for _, f := range missing {
		u := fmt.Sprintf("%s/%s/resolve/%s/%s", endpoint, repo, url.PathEscape(rev), f)
		if progress != nil {
			fmt.Fprintf(progress, "downloading %s from %s\n", f, u)
		}
		_, err := download.File(ctx, u, filepath.Join(dir, f), download.Options{
			Header:   authHeader(),
			Progress: progress,
			Desc:     f,
			Expect:   hubExpect,
		})
		var he *download.HTTPError
		var ue *url.Error
		switch {
		case err == nil:
		case errors.As(err, &he) && (he.Code == http.StatusUnauthorized || he.Code == http.StatusForbidden):
			return "", fmt.Errorf("%s: the Hub refused %s (%s): the repository is gated or private; accept its terms on the Hub and set HF_TOKEN", spec, u, he.Status)
		case errors.As(err, &he) && he.Code == http.StatusNotFound:
			return "", fmt.Errorf("%s: %s is not on the Hub (HTTP 404); check the name and revision (e.g. hf:openai-community/gpt2) and that the repository has a %s", spec, u, f)
		case errors.As(err, &he):
			return "", fmt.Errorf("%s: cannot download %s (%s); try again later, or %s", spec, u, he.Status, offline)
		case errors.As(err, &ue) && ctx.Err() == nil:
			return "", fmt.Errorf("%s: cannot reach the Hugging Face Hub at %s (%v); if offline, %s", spec, endpoint, ue.Err, offline)
		default:
			return "", fmt.Errorf("%s: download %s: %w", spec, u, err)
		}
	}
	return dir, nil
}

// parseSpec splits hf:OWNER/NAME[@REVISION] (revision "main" by default).
func parseSpec(spec string) (repo, rev string, err error) {
	rest, ok := strings.CutPrefix(spec, SpecPrefix)
	if !ok {
		return "", "", fmt.Errorf("%q is not a Hub model; write hf:OWNER/NAME, e.g. hf:openai-community/gpt2", spec)
	}
	repo, rev, hasRev := strings.Cut(rest, "@")
	if !hasRev {
		rev = "main"
	}
	if !repoName.MatchString(repo) || strings.Contains(repo, "..") || rev == "" || strings.Contains(rev, "..") {
		return "", "", fmt.Errorf("%q is not a Hub model; write hf:OWNER/NAME[@REVISION], e.g. hf:openai-community/gpt2", spec)
	}
	return repo, rev, nil
}

// hubExpect reads the size and SHA-256 of an LFS file from the Hub's headers on the way; a file
// kept in git itself (config.json) has neither and is checked against its Content-Length only.
func hubExpect(headers []http.Header) (download.Expected, error) {
	var want download.Expected
	for _, h := range headers {
		if s := h.Get(headerLinkedSize); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return want, fmt.Errorf("the Hub sent %s %q, not a size", headerLinkedSize, s)
			}
			want.Size = n
		}
		if etag := normalizeEtag(h.Get(headerLinkedEtag)); sha256Hex.MatchString(etag) {
			want.SHA256 = etag
		}
	}
	return want, nil
}

// normalizeEtag strips the weak marker and the quotes of an HTTP entity tag.
func normalizeEtag(etag string) string {
	etag = strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	return strings.ToLower(strings.Trim(etag, `"`))
}

func authHeader() http.Header {
	if token := os.Getenv("HF_TOKEN"); token != "" {
		return http.Header{"Authorization": {"Bearer " + token}}
	}
	return nil
}
