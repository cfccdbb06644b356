#!/usr/bin/env bash
# Runs every GPU test and the main GPU benchmarks on a machine with an NVIDIA GPU, then prints one
# summary table. It builds nothing (the GPU machine may have no Go): run scripts/gpu-build.sh first
# where Go is, and bring .gpubin/ along. PyTorch (for the peer benchmark) is optional.
#
#   scripts/gpu-check.sh [OUTDIR]      (logs go to OUTDIR, default $OUT or /tmp/gpu-check)
#
# QUICK=1 shortens the Shakespeare comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
bin=.gpubin
export GPT2GO_REQUIRE_GPU=1 GPT2GO_REQUIRE_NVRTC=1
export GPT2GO_KERNEL_CACHE="$out/kernel-cache"
export GPT2GO_SHAKESPEARE=${GPT2GO_SHAKESPEARE:-$(ls ../shared/data/tinyshakespeare.txt 2>/dev/null || true)}
py=${PYTHON:-python3}
rows=()
row() { rows+=("$(printf '%-44s | %-8s | %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
echo "GPU: $(cat "$out/gpu.txt")"
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
  (cd "$dir" && "$root/$bin/$t.test" -test.v -test.count=1 > "$out/test-$t.log" 2>&1) || status=FAIL
  pass=$(grep -c -- '--- PASS' "$out/test-$t.log"); skip=$(grep -c -- '--- SKIP' "$out/test-$t.log"); fail=$(grep -c -- '--- FAIL' "$out/test-$t.log")
  row "go test ./$dir" "$status" "$pass pass, $fail fail, $skip skip, $(( $(date +%s) - start )) s"
  grep -E -- '--- FAIL|--- SKIP|relative L2|skipped' "$out/test-$t.log" | head -60 > "$out/test-$t.summary"
done

# 2. GPT-2 124M training step, B=16 T=1024: gpt2go fp32 and TF32 vs PyTorch eager fp32 and TF32.
bench() { # name, command...
  local name=$1; shift
  if "$@" > "$out/bench-$name.log" 2>&1; then
    local ms tok
    ms=$(grep -o '"ms_per_step": *[0-9.]*' "$out/bench-$name.log" | tail -1 | grep -o '[0-9.]*$')
    tok=$(grep -o '"tok_per_s": *[0-9.]*' "$out/bench-$name.log" | tail -1 | grep -o '[0-9.]*$')
    row "124M B16 T1024 $name" "ok" "${ms:-?} ms/step, ${tok:-?} tok/s"
  else
    row "124M B16 T1024 $name" "FAIL" "$(tail -1 "$out/bench-$name.log")"
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

# 3. Shakespeare char-level: the GPU's loss curve against the CPU's, same seed and recipe.
if [ -n "$GPT2GO_SHAKESPEARE" ]; then
  steps=2000; [ "${QUICK:-0}" = 1 ] && steps=300
  common=(train --data "$GPT2GO_SHAKESPEARE" --tokenizer char --n-layer 4 --n-head 4 --n-embd 128 --block-size 64
          --seq-len 64 --batch-size 12 --steps $steps --lr 1e-3 --min-lr 1e-4 --warmup 100 --eval-every 250
          --eval-batches 20 --sample-every 0 --ckpt-every 0 --force --cache-dir "$out/cache")
  for dev in cuda cpu; do
    extra=(); [ $dev = cuda ] && extra=(--tf32=false)
    start=$(date +%s)
    if "$bin/gpt2go" "${common[@]}" --device $dev "${extra[@]}" --out "$out/char-$dev" > "$out/char-$dev.log" 2>&1; then
      v=$(grep -o '"val_loss":[0-9.]*' "$out/char-$dev/log.jsonl" | tail -1 | cut -d: -f2)
      row "shakespeare char $steps steps on $dev" "ok" "final val loss ${v:-?}, $(( $(date +%s) - start )) s"
    else
      row "shakespeare char on $dev" "FAIL" "$(tail -1 "$out/char-$dev.log")"
    fi
  done
  paste <(grep -o '"val_loss":[0-9.]*' "$out/char-cuda/log.jsonl" 2>/dev/null) \
        <(grep -o '"val_loss":[0-9.]*' "$out/char-cpu/log.jsonl" 2>/dev/null) > "$out/char-val-curves.txt"
else
  row "shakespeare char" "SKIP" "no tinyshakespeare.txt (set GPT2GO_SHAKESPEARE)"
fi

echo
printf '%-44s | %-8s | %s\n' "check" "status" "result"
printf -- '-%.0s' {1..100}; echo
printf '%s\n' "${rows[@]}"
echo "logs: $out"
