#!/usr/bin/env bash
# nanoGPT's small CPU recipe for char-level Tiny Shakespeare (its README: 4 layers, 4 heads,
# 128 wide, block 64, batch 12, lr 1e-3 -> 1e-4 cosine, warmup 100, beta2 0.99, 2000 iterations,
# random windows, no dropout; nanoGPT reports val loss ~1.88). Prints the final val loss and time.
#
#   scripts/shakespeare-char.sh [RUNDIR] [extra gpt2go train flags]
#
# Tiny Shakespeare comes from $GPT2GO_SHAKESPEARE, else ../shared/data/tinyshakespeare.txt,
# else it is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-runs/shakespeare-char}
shift || true
if [ -z "${GPT2GO_SHAKESPEARE:-}" ] && [ -f ../shared/data/tinyshakespeare.txt ]; then
  export GPT2GO_SHAKESPEARE=$PWD/../shared/data/tinyshakespeare.txt
fi
go build -o .bin/gpt2go ./cmd/gpt2go
start=$(date +%s)
.bin/gpt2go train --data shakespeare --out "$run" --force \
  --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --seq-len 64 --batch-size 12 \
  --lr 1e-3 --min-lr 1e-4 --lr-schedule cosine --warmup 100 --beta2 0.99 --weight-decay 0.1 \
  --grad-clip 1 --steps 2000 --shuffle --eval-every 250 --eval-batches 100 \
  --sample-every 1000 --sample-tokens 300 --ckpt-every 500 --log-every 100 "$@"
end=$(date +%s)
val=$(grep val_loss "$run/log.jsonl" | tail -1)
echo "final: $val wall $((end - start)) s"
