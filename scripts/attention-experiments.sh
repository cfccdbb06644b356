#!/usr/bin/env bash
# Classic attention pictures of small char-level models of Tiny Shakespeare, each model trained
# twice: with learned position embeddings and without (--no-pos-emb).
#
# The GPT-2 decoder (2 layers, 4 heads, 64 wide, 600 steps each; a few minutes of CPU):
#   docs/attention-init-vs-trained.png  layer 0 head 0 at step 0 (near uniform over the past:
#                                       1/(t+1) in row t) vs after training (a band along the
#                                       diagonal: it reads the current word)
#   docs/attention-pos-vs-nopos.png     all heads of layer 0 with vs without position embeddings:
#                                       without them a head sees which characters are there, not
#                                       where, so no diagonal bands, only columns for characters
#   docs/attention-heads.png            the four heads of layer 0 of the trained model side by side
#   docs/attention-curves.png           the two runs' loss and learning-rate curves
#
# The BERT encoder (scripts/shakespeare-bert.sh's model: 4 layers, 4 heads, 128 wide, masked-
# language modelling, 4000 steps each; about 15 minutes of CPU), over a line with one [MASK]:
#   docs/attention-bert-init-vs-trained.png  layer 0 head BERT_HEAD at step 0 (uniform over the
#                                       whole line, future included: no triangle) vs trained
#   docs/attention-bert-pos-vs-nopos.png     all heads of layer 0, with vs without position
#                                       embeddings: without them the encoder cannot tell
#                                       order at all (it is permutation-equivariant)
#   docs/attention-bert-heads.png       the four heads of layer BERT_LAYER of the trained model
#   docs/attention-bert-curves.png      the two runs' MLM loss and masked-char accuracy
#
#   scripts/attention-experiments.sh [STEPS] [BERT_STEPS]     (ONLY=gpt or ONLY=bert: one half)
#
# Tiny Shakespeare comes from $GPT2GO_SHAKESPEARE, else ../shared/data/tinyshakespeare.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-600}
bert_steps=${2:-4000}
only=${ONLY:-}
text=${GPT2GO_SHAKESPEARE:-../shared/data/tinyshakespeare.txt}
if [ ! -f "$text" ]; then
  echo "attention-experiments: no Tiny Shakespeare at $text; set GPT2GO_SHAKESPEARE=FILE" >&2
  exit 1
fi
go build -o .bin/gpt2go ./cmd/gpt2go
g=.bin/gpt2go

gpt_experiments() {
  data=runs/attn-shakespeare-char
  $g prepare --input "$text" --out "$data" --tokenizer char

  train=(--data "$data" --n-layer 2 --n-head 4 --n-embd 64 --block-size 64 --seq-len 64
    --batch-size 16 --lr 5e-3 --min-lr 5e-4 --warmup $((steps < 500 ? steps / 10 : 50)) --beta2 0.99 --grad-clip 1 --shuffle
    --steps "$steps" --eval-every 100 --eval-batches 20 --ckpt-every "$steps" --log-every 100
    --sample-every 0 --force)
  start=$(date +%s)
  $g train "${train[@]}" --out runs/attn-pos
  $g train "${train[@]}" --out runs/attn-nopos --no-pos-emb
  echo "trained both runs in $(($(date +%s) - start)) s"

  line=$'ROMEO:\nBut soft! what light through yonder window breaks?'
  $g attn --ckpt runs/attn-pos/checkpoints/step_00000000.safetensors --compare runs/attn-pos \
    --text "$line" --layer 0 --head 0 --out docs/attention-init-vs-trained.png
  $g attn --ckpt runs/attn-pos --compare runs/attn-nopos --text "$line" --layer 0 \
    --out docs/attention-pos-vs-nopos.png
  $g attn --ckpt runs/attn-pos --text "$line" --layer 0 --out docs/attention-heads.png
  $g plot runs/attn-pos runs/attn-nopos --smooth 0.8 --title "char-level Tiny Shakespeare, with and without position embeddings" \
    --out docs/attention-curves.png
  for run in attn-pos attn-nopos; do
    echo "$run: $(grep val_loss runs/$run/log.jsonl | tail -1)"
  done
}

bert_experiments() {
  local data=runs/attn-shakespeare-bert
  $g prepare --input "$text" --out "$data" --tokenizer char --bert-specials
  # scripts/shakespeare-bert.sh's model, optimizer and steps: the run with position embeddings is that run.
  local train=(--arch bert --data "$data" --n-layer 4 --n-head 4 --n-embd 128 --block-size 64
    --seq-len 64 --batch-size 32 --pre-ln --lr 3e-3 --min-lr 1e-4 --warmup $((bert_steps / 10))
    --weight-decay 0.01 --beta2 0.99 --eps 1e-6 --grad-clip 1 --shuffle=false --steps "$bert_steps"
    --eval-every 250 --eval-batches 10 --ckpt-every "$bert_steps" --log-every 50 --seed 1337 --force)
  local start=$(date +%s)
  $g train "${train[@]}" --out runs/attn-bert-pos
  $g train "${train[@]}" --out runs/attn-bert-nopos --no-pos-emb
  echo "trained both encoders in $(($(date +%s) - start)) s"

  local line='But soft! what l[MASK]ght through yonder window breaks?'
  local common=(--text "$line" --max-tokens 64)
  $g attn --ckpt runs/attn-bert-pos/checkpoints/step_00000000.safetensors --compare runs/attn-bert-pos \
    "${common[@]}" --layer 0 --head "${BERT_HEAD:-3}" --out docs/attention-bert-init-vs-trained.png
  $g attn --ckpt runs/attn-bert-pos --compare runs/attn-bert-nopos "${common[@]}" --layer 0 \
    --out docs/attention-bert-pos-vs-nopos.png
  $g attn --ckpt runs/attn-bert-pos "${common[@]}" --layer "${BERT_LAYER:-1}" --out docs/attention-bert-heads.png
  $g plot runs/attn-bert-pos runs/attn-bert-nopos --what loss,acc --smooth 0.8 \
    --title "char-level BERT on Tiny Shakespeare, with and without position embeddings" \
    --out docs/attention-bert-curves.png
  for run in attn-bert-pos attn-bert-nopos; do
    echo "$run: $(grep val_loss runs/$run/log.jsonl | tail -1)"
    $g fill --ckpt runs/$run --text "$line" --top-k 3
  done
}

mkdir -p docs
[ "$only" = bert ] || gpt_experiments
[ "$only" = gpt ] || bert_experiments
