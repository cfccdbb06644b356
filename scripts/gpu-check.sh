#!/usr/bin/env bash
# Runs every GPU test and the main GPU benchmarks on a machine with an NVIDIA GPU, then prints one
# summary table. It builds nothing (the GPU machine may have no Go): run scripts/gpu-build.sh first
# where Go is, and bring .gpupack/ (or .gpubin/) along. PyTorch (for the peer benchmark) is optional.
#
#   scripts/gpu-check.sh [OUTDIR]
#
# Logs go to a work folder (/tmp/gpu-check); OUTDIR (default $OUT, when set) gets few files, as the
# device tool brings back at most 8: summary.txt, profile-124m.txt, char-val-curves.txt and
# logs.tgz with everything.
#
# QUICK=1 shortens the Shakespeare comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-}}
work=/tmp/gpu-check
rm -rf "$work" && mkdir -p "$work"
bin=.gpubin
[ -f .gpupack/bin.tar.xz ] && tar xJf .gpupack/bin.tar.xz
export GPT2GO_REQUIRE_GPU=1 GPT2GO_REQUIRE_NVRTC=1
export GPT2GO_KERNEL_CACHE="$work/kernel-cache"
export GPT2GO_SHAKESPEARE=${GPT2GO_SHAKESPEARE:-$(ls .gpupack/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt 2>/dev/null | head -1)}
py=${PYTHON:-python3}
rows=()
row() { rows+=("$(printf '%-44s | %-8s | %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$work/gpu.txt" 2>&1
echo "GPU: $(cat "$work/gpu.txt")"
# The host CPU: its matmul kernel (AVX-512 where it has it) is tested below with the CPU backend.
cpumodel=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
grep -q -m1 avx512f /proc/cpuinfo && cpumodel="$cpumodel, avx512f" || cpumodel="$cpumodel, no avx512f"
[ -x "$bin/gpt2go" ] && row "host CPU matmul kernel" "info" "$("$bin/gpt2go" version | sed -n 's/^cpu matmul kernel: //p') ($cpumodel)"

# 1. Go test binaries: op-by-op vs the CPU backend, PyTorch-parity fixture, exact resume; and the
# CPU backend's own tests, which run the AVX-512 kernel on a host CPU that has it.
root=$(pwd)
for spec in cuda:backend/cuda cpu:backend/cpu gpt:gpt train:train; do
  t=${spec%%:*} dir=${spec#*:}
  if [ ! -x "$bin/$t.test" ]; then row "go test ./$dir" "MISSING" "run scripts/gpu-build.sh"; continue; fi
  start=$(date +%s)
  status=PASS
  (cd "$dir" && "$root/$bin/$t.test" -test.v -test.count=1 > "$work/test-$t.log" 2>&1) || status=FAIL
  pass=$(grep -c -- '--- PASS' "$work/test-$t.log"); skip=$(grep -c -- '--- SKIP' "$work/test-$t.log"); fail=$(grep -c -- '--- FAIL' "$work/test-$t.log")
  row "go test ./$dir" "$status" "$pass pass, $fail fail, $skip skip, $(( $(date +%s) - start )) s"
  grep -E -- '--- FAIL|--- SKIP|relative L2|skipped' "$work/test-$t.log" | head -60 > "$work/test-$t.summary"
done

# Attention kernels alone at GPT-2 124M's shape (B=8 T=1024 NH=12 HS=64).
(cd backend/cuda && "$root/$bin/cuda.test" -test.run XXX -test.bench Attention -test.benchtime 5x > "$work/bench-attention.log" 2>&1)
for dir in forward backward; do
  line=$(grep "BenchmarkAttention/$dir/tiled" "$work/bench-attention.log" | head -1)
  [ -n "$line" ] && row "attention $dir B8 T1024 HS64 (tiled)" "ok" "$(echo "$line" | awk '{printf "%.3f ms, %s GFLOP/s", $3/1e6, $5}')" \
    || row "attention $dir benchmark" "FAIL" "$(tail -1 "$work/bench-attention.log")"
done

# The host CPU's sgemm with its best kernel (AVX-512 where it has it) against the AVX2 kernel, at
# the 124M model's forward shapes on all cores, interleaved twice.
sg=()
for round in 1 2; do
  for k in default avx2; do
    v=$(cd backend/cpu && GPT2GO_SGEMM=$([ $k = avx2 ] && echo avx2) "$root/$bin/cpu.test" -test.run XXX \
        -test.bench 'Sgemm/fwd/M=256,N=(768,K=3072|50304)' -test.benchtime 20x 2>/dev/null | awk '/GFLOP/ {printf "%s ", $(NF-1)}')
    sg+=("$k: $v")
  done
done
row "host sgemm GFLOP/s (fwd 256x768x3072, LM head)" "info" "${sg[*]}"

# 2. GPT-2 124M training step, B=16 T=1024: gpt2go fp32 and TF32 vs PyTorch eager fp32 and TF32.
bench() { # name, command...
  local name=$1 log; shift
  log=$work/bench-${name// /-}.log
  if "$@" > "$log" 2>&1; then
    local ms tok
    ms=$(grep -o '"ms_per_step": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    tok=$(grep -o '"tok_per_s": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    row "124M B16 T1024 $name" "ok" "$(printf '%.1f ms/step, %.0f tok/s' "${ms:-0}" "${tok:-0}")"
  else
    row "124M B16 T1024 $name" "FAIL" "$(tail -1 "$log")"
  fi
}
bench "gpt2go fp32" "$bin/gpt2go" bench --device cuda --tf32=false --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
bench "gpt2go tf32" "$bin/gpt2go" bench --device cuda --tf32=true --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
if $py -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  bench "torch fp32" $py bench/torch_gpu.py --tf32 0 -B 16 -T 1024 --warmup-steps 2 --steps 10 --json
  bench "torch tf32" $py bench/torch_gpu.py --tf32 1 -B 16 -T 1024 --warmup-steps 2 --steps 10 --json
else
  row "PyTorch peer" "SKIP" "no PyTorch with CUDA for $py"
fi

# Where the 124M TF32 step's time goes: the op table, synced after every op.
"$bin/gpt2go" profile --device cuda --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 1 --steps 2 \
  > "$work/profile-124m.txt" 2>&1 || row "profile 124M B16 T1024" "FAIL" "$(tail -1 "$work/profile-124m.txt")"

# 3. Shakespeare char-level: the GPU's loss curve against the CPU's, same seed and recipe.
if [ -n "$GPT2GO_SHAKESPEARE" ]; then
  steps=2000; [ "${QUICK:-0}" = 1 ] && steps=300
  common=(train --data "$GPT2GO_SHAKESPEARE" --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --seq-len 64
          --batch-size 12 --steps $steps --lr 1e-3 --min-lr 1e-4 --lr-schedule cosine --warmup 100 --beta2 0.99
          --weight-decay 0.1 --grad-clip 1 --shuffle --eval-every 250 --eval-batches 100 --sample-every 0
          --ckpt-every 0 --log-every 100 --force --cache-dir "$work/cache")
  for dev in cuda cpu; do
    extra=(); [ $dev = cuda ] && extra=(--tf32=false)
    start=$(date +%s)
    if "$bin/gpt2go" "${common[@]}" --device $dev "${extra[@]}" --out "$work/char-$dev" > "$work/char-$dev.log" 2>&1; then
      v=$(grep -o '"val_loss":[0-9.]*' "$work/char-$dev/log.jsonl" | tail -1 | cut -d: -f2)
      row "shakespeare char $steps steps on $dev" "ok" "final val loss ${v:-?}, $(( $(date +%s) - start )) s"
    else
      row "shakespeare char on $dev" "FAIL" "$(tail -1 "$work/char-$dev.log")"
    fi
  done
  paste <(grep -o '"val_loss":[0-9.]*' "$work/char-cuda/log.jsonl" 2>/dev/null) \
        <(grep -o '"val_loss":[0-9.]*' "$work/char-cpu/log.jsonl" 2>/dev/null) > "$work/char-val-curves.txt"
else
  row "shakespeare char" "SKIP" "no tinyshakespeare.txt (set GPT2GO_SHAKESPEARE)"
fi

# 4. The command line on the GPU: --device auto picks it, sample and eval run on it (eval's loss
# matches the CPU's), and a model that cannot fit stops before allocating, with a clear message.
if "$bin/gpt2go" train --data "${GPT2GO_SHAKESPEARE:-go}" --steps 20 --log-every 10 --sample-every 0 --ckpt-every 0 \
    --force --cache-dir "$work/cache" --out "$work/auto" > "$work/auto.log" 2>&1; then
  row "train --device auto (default)" "ok" "$(grep -m1 -o 'cuda:[0-9][^,]*' "$work/auto.log" || echo 'did not say cuda')"
else
  row "train --device auto (default)" "FAIL" "$(tail -1 "$work/auto.log")"
fi
if [ -d "$work/char-cuda" ]; then
  if "$bin/gpt2go" sample --ckpt "$work/char-cuda" --device cuda --tokens 60 --prompt "ROMEO:" > "$work/sample.log" 2>&1; then
    row "sample --device cuda" "ok" "$(tr '\n' ' ' < "$work/sample.log" | tail -c 70)"
  else
    row "sample --device cuda" "FAIL" "$(tail -1 "$work/sample.log")"
  fi
  for dev in cuda cpu; do
    "$bin/gpt2go" eval --ckpt "$work/char-cuda" --device $dev --tf32=false --text "$GPT2GO_SHAKESPEARE" \
      > "$work/eval-$dev.log" 2>&1 || echo "FAILED" >> "$work/eval-$dev.log"
  done
  row "eval on cuda | on cpu" "$(grep -q FAILED "$work"/eval-*.log && echo FAIL || echo ok)" \
    "$(grep -o 'loss [0-9.]* | perplexity [0-9.]*' "$work/eval-cuda.log") | $(grep -o 'loss [0-9.]* | perplexity [0-9.]*' "$work/eval-cpu.log")"
fi
if "$bin/gpt2go" bench --device cuda --model gpt2-xl --batch-size 512 --seq-len 1024 --steps 1 > "$work/oom.log" 2>&1; then
  row "a model too big for the GPU" "FAIL" "gpt2-xl at B=512 T=1024 did not stop"
else
  row "a model too big for the GPU" "ok" "$(tail -1 "$work/oom.log" | cut -c1-150)"
fi

{
  printf '%-44s | %-8s | %s\n' "check" "status" "result"
  printf -- '-%.0s' {1..100}; echo
  printf '%s\n' "${rows[@]}"
} > "$work/summary.txt"
echo; sed -n '/^name /,/^$/p' "$work/profile-124m.txt" | head -20
echo; cat "$work/summary.txt"
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$work/summary.txt" "$work/profile-124m.txt" "$out/"
  [ -f "$work/char-val-curves.txt" ] && cp "$work/char-val-curves.txt" "$out/"
  tar czf "$out/logs.tgz" -C "$work" --exclude=kernel-cache --exclude=cache --exclude='*.ckpt' --exclude='*.safetensors' .
  echo "logs: $out/logs.tgz"
else
  echo "logs: $work"
fi
