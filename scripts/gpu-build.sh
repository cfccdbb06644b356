#!/usr/bin/env bash
# Builds, on a machine with Go, everything scripts/gpu-check.sh runs on a GPU machine (which has no
# Go): stripped cgo-free binaries (they need only libc) in .gpubin/, and the same packed with the
# Shakespeare text into .gpupack/ (about 14 MB, what the device tool carries:
# `carry: [".gpupack"]`). Then, there:
#   scripts/gpu-check.sh $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
rm -rf .gpubin && mkdir -p .gpubin .gpupack
go build -ldflags="-s -w" -o .gpubin/gpt2go ./cmd/gpt2go
for pkg in backend/cuda backend/cpu gpt bert train dist/nccl; do
  go test -c -ldflags="-s -w" -o ".gpubin/$(basename "$pkg").test" "./$pkg"
done
tar cJf .gpupack/bin.tar.xz .gpubin
text=${GPT2GO_SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
[ -f "$text" ] && cp "$text" .gpupack/tinyshakespeare.txt
ls -la .gpubin .gpupack
