#!/usr/bin/env bash
# Char-level BERT on Tiny Shakespeare: a pre-LN encoder (4 layers, 4 heads, 128 wide, 0.83M
# params) trained by masked-language modelling for STEPS steps of 32 x 64 characters, read in
# order, then `gpt2go fill` on a few lines. With COMPARE=1 the same model, data order, AdamW and
# schedule run in PyTorch (tools/reference/shakespeare_bert.py, Debian's torch for
# /usr/bin/python3), from gpt2go's initial weights (its step-0 checkpoint) and with gpt2go's masks
# draw for draw, and a table compares the two runs step by step and at the end.
# Give torch a fast BLAS first (apt-get install libopenblas0-pthread): with Debian's reference
# BLAS a step takes seconds.
#
#   scripts/shakespeare-bert.sh [STEPS]          (default 4000: ~5 min on 2 CPU cores)
#   COMPARE=1 scripts/shakespeare-bert.sh [STEPS]  (PyTorch adds ~22 min)
#
# The first ~900 steps sit on MLM's plateau: loss ~3.0, accuracy ~0.23, what the characters'
# frequencies and the 10% of chosen positions left unchanged give, because attention that is
# near uniform at init cannot yet tell a neighbour from a character far away. Then attention
# learns to read the neighbours and the loss falls (val accuracy ~0.45 at step 2000, ~0.55 at
# 4000); a run much shorter than 1500 steps, whose learning rate decays on the plateau, stays
# there, and its fill answers are the most frequent letters.
#
# Tiny Shakespeare comes from $GPT2GO_SHAKESPEARE, else ../shared/data/tinyshakespeare.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4000}
text=${GPT2GO_SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$text" ]; then
  echo "shakespeare-bert: no Tiny Shakespeare at $text; set GPT2GO_SHAKESPEARE=FILE" >&2
  exit 1
fi
go build -o .bin/gpt2go ./cmd/gpt2go
g=.bin/gpt2go
data=runs/shakespeare-bert-data run=runs/shakespeare-bert
$g prepare --input "$text" --out "$data" --tokenizer char --bert-specials

# BERT's AdamW settings (eps 1e-6, weight decay 0.01) with beta2 0.99 and a high learning rate
# for a small model, warmup over 10% of the steps.
hp=(--n-layer 4 --n-head 4 --n-embd 128 --seq-len 64 --batch-size 32 --steps "$steps" --pre-ln
  --lr 3e-3 --min-lr 1e-4 --warmup $((steps / 10)) --weight-decay 0.01 --beta1 0.9 --beta2 0.99
  --eps 1e-6 --grad-clip 1.0 --eval-every 200 --eval-batches 10 --seed 1337)
start=$(date +%s)
$g train --arch bert --data "$data" --out "$run" --force --block-size 64 --shuffle=false \
  --ckpt-every "$steps" --log-every 50 "${hp[@]}"
echo "gpt2go: trained in $(($(date +%s) - start)) s"

for line in "To be or not to b[MASK], that is the question." \
  "ROMEO:\nBut soft! what l[MASK]ght through yonder window breaks?" \
  "KING RICH[MASK]RD III:" \
  "My lord, I h[MASK]ve a letter fr[MASK]m the k[MASK]ng."; do
  $g fill --ckpt "$run" --text "$(printf '%b' "$line")" --top-k 3
done

if [ "${COMPARE:-0}" = 1 ]; then
  start=$(date +%s)
  /usr/bin/python3 tools/reference/shakespeare_bert.py --data "$data" --threads 2 --log-every 50 \
    --block-size 64 --init-from "$run/checkpoints/step_00000000.safetensors" --masks go \
    --json "$run/pytorch.json" "${hp[@]}"
  echo "pytorch: trained in $(($(date +%s) - start)) s"
  /usr/bin/python3 - "$run" <<'PY'
import json, statistics, sys
run = sys.argv[1]
log = [json.loads(l) for l in open(run + "/log.jsonl")]
train = [e for e in log if "loss" in e]
val = [e for e in log if "val_loss" in e][-1]
ref = json.load(open(run + "/pytorch.json"))
go = {"final_train_loss": statistics.mean(e["loss"] for e in train[-20:]), "val_loss": val["val_loss"],
      "val_acc": val["val_acc"], "ms_per_step": statistics.median(e["ms"] for e in train[1:])}
print("| after %d steps | gpt2go | PyTorch %s |" % (len(train), ref["torch_version"]))
print("|---|---|---|")
for k, name in [("final_train_loss", "train MLM loss (mean of the last 20 steps)"), ("val_loss", "val MLM loss"),
                ("val_acc", "val masked-char accuracy"), ("ms_per_step", "ms/step (median)")]:
    print("| %s | %.4f | %.4f |" % (name, go[k], ref[k]))
# Step by step: the same weights and masks, so the losses agree to rounding until it grows.
print()
print("| step | gpt2go train loss | PyTorch | gpt2go val loss | PyTorch val | gpt2go val acc | PyTorch val acc |")
print("|---|---|---|---|---|---|---|")
vals = {e["step"]: e for e in log if "val_loss" in e}
pvals = {h["step"]: h for h in ref["val_history"]}
for e in train:
    s = e["step"]
    if s in (1, 10, 50, 100) or s in vals:
        v, pv = vals.get(s), pvals.get(s)
        print("| %d | %.4f | %.4f | %s | %s | %s | %s |" % (s, e["loss"], ref["train_losses"][s - 1],
              "%.4f" % v["val_loss"] if v else "", "%.4f" % pv["val_loss"] if pv else "",
              "%.4f" % v["val_acc"] if v else "", "%.4f" % pv["val_acc"] if pv else ""))
PY
fi
