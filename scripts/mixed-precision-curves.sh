#!/usr/bin/env bash
# Trains nanoGPT's Shakespeare char recipe (scripts/shakespeare-char.sh) in fp32, bf16 and fp16
# and overlays the curves in docs/mixed-precision-char.png (docs/mixed-precision.md). On 2 CPU
# cores each run takes 3-4 minutes. Extra arguments go to every run (e.g. --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
for p in fp32 bf16 fp16; do
  scripts/shakespeare-char.sh "runs/char-$p" --precision "$p" "$@"
done
.bin/gpt2go plot runs/char-fp32 runs/char-bf16 runs/char-fp16 --what loss,grad_norm --smooth 0.95 \
  --out docs/mixed-precision-char.png
