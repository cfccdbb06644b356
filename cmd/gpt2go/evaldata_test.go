package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// eval --data FILE.bin evaluates exactly that file: a train shard is not swapped for its val
// sibling, and a val shard is not reported as "train". A directory keeps the --split choice, so
// each file alone gives the same loss as its split of the directory.
func TestEvalDataFile(t *testing.T) {
	dataDir := prepared(t)
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "3", "--eval-every", "0", "--sample-tokens", "0")...)
	eval := func(args ...string) (loss float64, split string) {
		t.Helper()
		var res struct {
			Loss  float64
			Split string
		}
		js := mustRun(t, append([]string{"eval", "--ckpt", runDir, "--batches", "3", "--seq-len", "32", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(js), &res); err != nil {
			t.Fatalf("eval %v: %q: %v", args, js, err)
		}
		return res.Loss, res.Split
	}
	trainFile, valFile := filepath.Join(dataDir, "train_000000.bin"), filepath.Join(dataDir, "val_000000.bin")
	dirVal, splitVal := eval("--data", dataDir)
	dirTrain, splitTrain := eval("--data", dataDir, "--split", "train")
	fileTrain, nameTrain := eval("--data", trainFile)
	fileVal, nameVal := eval("--data", valFile)
	if splitVal != "val" || splitTrain != "train" || nameTrain != "train_000000.bin" || nameVal != "val_000000.bin" {
		t.Errorf("splits %q %q %q %q", splitVal, splitTrain, nameTrain, nameVal)
	}
	if fileTrain != dirTrain || fileVal != dirVal || dirTrain == dirVal {
		t.Errorf("train: file %v dir %v; val: file %v dir %v", fileTrain, dirTrain, fileVal, dirVal)
	}
	mustFail(t, "is one shard", "eval", "--ckpt", runDir, "--data", trainFile, "--split", "val")
	mustFail(t, "unknown --split", "eval", "--ckpt", runDir, "--data", dataDir, "--split", "test")
}
