#!/usr/bin/env bash
# Builds, on a machine with Go, everything scripts/gpu-check.sh runs on a GPU machine (which has no
# Go): static binaries in .gpubin/. Then carry .gpubin to the GPU machine and run the check there.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
mkdir -p .gpubin
go build -o .gpubin/gpt2go ./cmd/gpt2go
for pkg in backend/cuda backend/cpu gpt train; do
  go test -c -o ".gpubin/$(basename "$pkg").test" "./$pkg"
done
ls -la .gpubin
