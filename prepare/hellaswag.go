package prepare

import (
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path/filepath"
)

// HellaSwagValURL is the official HellaSwag validation set (10,042 items); a variable so tests
// can point it at a local server.
var HellaSwagValURL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"

// ResolveHellaSwag turns a --hellaswag argument into a jsonl path for eval.ReadHellaSwag: "val"
// is the official validation set, taken from cacheDir/hellaswag_val.jsonl when it was downloaded
// before and downloaded there (once, atomically) otherwise; anything else must be an existing
// file. cacheDir "" means DefaultCacheDir(). progress (may be nil) is told about downloads.
func ResolveHellaSwag(spec, cacheDir string, progress io.Writer) (string, error) {
	if spec != "val" {
		if _, err := os.Stat(spec); err != nil {
			return "", fmt.Errorf("hellaswag: %w; pass a HellaSwag .jsonl file or \"val\"", err)
		}
		return spec, nil
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	path := filepath.Join(cacheDir, "hellaswag_val.jsonl")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("hellaswag: %w", err)
	}
	if progress != nil {
		fmt.Fprintf(progress, "downloading the HellaSwag validation set from %s to %s\n", HellaSwagValURL, path)
	}
	if err := fetch(HellaSwagValURL, path, progress); err != nil {
		if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // the message names the URL already
		}
		return "", fmt.Errorf("hellaswag: cannot download %s (%v); when offline, fetch it elsewhere and pass --hellaswag /path/to/hellaswag_val.jsonl", HellaSwagValURL, err)
	}
	return path, nil
}
