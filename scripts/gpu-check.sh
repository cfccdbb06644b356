#!/usr/bin/env bash
# Runs every GPU test and the main GPU benchmarks on a machine with an NVIDIA GPU, then prints one
# summary table. It builds nothing (the GPU machine may have no Go): run scripts/gpu-build.sh first
# where Go is, and bring .gpupack/ (or .gpubin/) along. PyTorch (for the peer benchmark) is optional.
#
#   PART=1 scripts/gpu-check.sh [OUTDIR]   tests, the 124M speed table, the command line, NCCL (~7 min)
#   PART=2 scripts/gpu-check.sh [OUTDIR]   precision curves: char Shakespeare, 124M on BPE; the
#                                          transformers check of the HF export (~9 min)
#   PART=3 scripts/gpu-check.sh [OUTDIR]   the speed ladder: gpt2go's rungs and PyTorch's (build-
#                                          nanogpt's road, torch.compile included) at B=16 (~6 min)
#   scripts/gpu-check.sh [OUTDIR]          all three (over the device tool's 10 minutes a call)
#
# Logs go to a work folder (/tmp/gpu-check-PART); OUTDIR (default $OUT, when set) gets few files,
# as the device tool brings back at most 8: summary-PART.txt, profile-124m.txt (part 1),
# char-val-curves.txt and bpe-124m-precisions.png (part 2), ladder.txt (part 3), and
# logs-PART.tgz with everything.
#
# QUICK=1 shortens the Shakespeare char comparison (300 steps instead of 2000).
# Under the device tool's 10-minute limit, run it as `timeout 580 scripts/gpu-check.sh $OUT`: on
# the signal it writes the summary of what it reached and packs the logs (rows-PART.txt in
# OUTDIR also grows row by row).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-}}
part=${PART:-all}
work=/tmp/gpu-check-$part
p1() { [ "$part" = all ] || [ "$part" = 1 ]; }
p2() { [ "$part" = all ] || [ "$part" = 2 ]; }
p3() { [ "$part" = all ] || [ "$part" = 3 ]; }
rm -rf "$work" && mkdir -p "$work"
trap 'row "gpu-check PART=$part" "STOPPED" "a signal ended the run here; the rows above are what it reached"; finish; exit 143' TERM INT
bin=.gpubin
[ -f .gpupack/bin.tar.xz ] && tar xJf .gpupack/bin.tar.xz
export GPT2GO_REQUIRE_GPU=1 GPT2GO_REQUIRE_NVRTC=1
export GPT2GO_KERNEL_CACHE="$work/kernel-cache"
export GPT2GO_SHAKESPEARE=${GPT2GO_SHAKESPEARE:-$(ls .gpupack/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt 2>/dev/null | head -1)}
py=${PYTHON:-python3}
rows=()
# row adds a line to the summary; each also goes at once to OUTDIR/rows-PART.txt, so a run the
# device tool stops at its time limit still brings back what it reached.
row() {
  rows+=("$(printf '%-44s | %-8s | %s' "$1" "$2" "$3")")
  if [ -n "$out" ]; then mkdir -p "$out" && printf '%s\n' "${rows[-1]}" >> "$out/rows-$part.txt"; fi
  return 0 # callers write `check && row ok || row FAIL`
}
[ -n "$out" ] && mkdir -p "$out" && rm -f "$out/rows-$part.txt"
# finish writes the summary and packs the logs into OUTDIR: at the end, or when a signal (the
# device tool's time limit under `timeout`) stops the run.
finish() {
  trap - EXIT TERM INT
  {
    printf '%-44s | %-8s | %s\n' "check" "status" "result"
    printf -- '-%.0s' {1..100}; echo
    printf '%s\n' "${rows[@]}"
    [ -s "$work/ladder.txt" ] && { echo; cat "$work/ladder.txt"; }
  } > "$work/summary-$part.txt"
  echo; cat "$work/summary-$part.txt"
  if [ -n "$out" ]; then
    mkdir -p "$out"
    cp "$work/summary-$part.txt" "$out/"
    for f in profile-124m.txt char-val-curves.txt bpe-124m-precisions.png ladder.txt; do [ -f "$work/$f" ] && cp "$work/$f" "$out/"; done
    tar czf "$out/logs-$part.tgz" -C "$work" --exclude=kernel-cache --exclude=cache --exclude=ts-bpe --exclude='*.ckpt' --exclude='*.safetensors' .
    echo "logs: $out/logs-$part.tgz"
  else
    echo "logs: $work"
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$work/gpu.txt" 2>&1
echo "GPU: $(cat "$work/gpu.txt")"
# The host CPU: its matmul kernel (AVX-512 where it has it) is tested below with the CPU backend.
cpumodel=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
grep -q -m1 avx512f /proc/cpuinfo && cpumodel="$cpumodel, avx512f" || cpumodel="$cpumodel, no avx512f"
[ -x "$bin/gpt2go" ] && row "host CPU matmul kernel" "info" "$("$bin/gpt2go" version | sed -n 's/^cpu matmul kernel: //p') ($cpumodel)"

root=$(pwd)
# ---------------------------------------------------------------------------------------------
# Part 1. Go test binaries: op-by-op vs the CPU backend (fp32, TF32, and bf16/fp16 against the
# CPU's exact emulation), PyTorch-parity fixture, exact resume (fp32 and bf16/fp16); and the CPU
# backend's own tests, which run the AVX-512 kernel on a host CPU that has it.
if p1; then
for spec in cuda:backend/cuda cpu:backend/cpu gpt:gpt bert:bert train:train nccl:dist/nccl; do
  t=${spec%%:*} dir=${spec#*:}
  if [ ! -x "$bin/$t.test" ]; then row "go test ./$dir" "MISSING" "run scripts/gpu-build.sh"; continue; fi
  start=$(date +%s)
  status=PASS
  # NCCL's tests skip without libnccl; here its absence is a failure, as the GPU's is.
  require=(); [ "$t" = nccl ] && require=(GPT2GO_REQUIRE_NCCL=1)
  (cd "$dir" && env "${require[@]}" "$root/$bin/$t.test" -test.v -test.count=1 > "$work/test-$t.log" 2>&1) || status=FAIL
  pass=$(grep -c -- '--- PASS' "$work/test-$t.log"); skip=$(grep -c -- '--- SKIP' "$work/test-$t.log"); fail=$(grep -c -- '--- FAIL' "$work/test-$t.log")
  row "go test ./$dir" "$status" "$pass pass, $fail fail, $skip skip, $(( $(date +%s) - start )) s"
  grep -E -- '--- FAIL|--- SKIP|relative L2|skipped' "$work/test-$t.log" | head -60 > "$work/test-$t.summary"
done
# The mixed-precision checks by name, so their rows show even when the package passes as a whole.
for spec in cuda:TestOps16MatchCPU cuda:TestConvertMatchesCPUBits gpt:TestCUDAMixedPrecisionTracksCPU train:TestCUDAMixedPrecisionResumeIsBitIdentical \
    bert:TestCUDAForwardBackwardMatchesPyTorch bert:TestCUDATenAdamWStepsMatchPyTorch bert:TestCUDAMixedPrecisionMatchesPyTorch bert:TestCUDAMatchesCPUAtHeadSize64 \
    cuda:TestAttentionTensorCores cuda:TestMatmulTuning cuda:TestCrossEntropyPaths gpt:TestCUDAForwardTrainMatchesForward \
    cuda:TestGeluFusion cuda:TestMatchTargets cuda:TestMatmulEpilogueFallbacks cuda:TestGradStatsOnGPU cuda:TestAdamWAllOnGPU cuda:TestElementwiseVectorised cuda:TestAsyncDownload \
    cuda:TestEncoderBackwardPaths cuda:TestGraphReplays cuda:TestGraphRefusesHostWork train:TestCUDAPipelinedStepsMatch \
    cuda:TestSideStreamOrder cuda:TestInt8MatchesCPUBits gpt:TestCUDAQuantizeInt8 gpt:TestCUDAInt8TracksCPU gpt:TestCUDANewInferenceInt8 \
    gpt:TestCUDAKVCacheMatchesForward cuda:TestAttentionForwardCachedMatchesCPU \
    nccl:TestOneRank nccl:TestWatchdogEndsAStuckCollective; do
  t=${spec%%:*} name=${spec#*:}
  log=$work/test-$t.log
  [ -f "$log" ] || continue
  if grep -q -- "--- PASS: $name " "$log"; then st=PASS; elif grep -q -- "--- FAIL: $name " "$log"; then st=FAIL; else st=MISSING; fi
  worst=$(grep -A400 -- "=== RUN   $name" "$log" | grep -o 'relative L2 error [0-9.e+-]*' | awk '{print $4}' | sort -g | tail -1)
  row "$name" "$st" "$( [ -n "$worst" ] && echo "largest relative L2 $worst; " )see test-$t.log"
done
# Which libnccl the NCCL tests loaded (TestOneRank logs "NCCL <version> (<path>)"): pip's
# nvidia-nccl-cu* wheel, the CUDA toolkit or the system.
if [ -f "$work/test-nccl.log" ]; then
  nccl=$(grep -m1 -o 'NCCL [0-9][0-9.]* ([^)]*)' "$work/test-nccl.log")
  case $nccl in
    *site-packages/nvidia/nccl*) from="pip's nvidia-nccl wheel" ;;
    "") from="" ;;
    *) from="not pip's wheel" ;;
  esac
  if [ -n "$nccl" ]; then row "libnccl loaded" "info" "$nccl, $from"
  else row "libnccl loaded" "FAIL" "TestOneRank named no NCCL; see test-nccl.log"; fi
fi

# Attention kernels alone at GPT-2 124M's shape (B=8 T=1024 NH=12 HS=64, causal), TFLOP/s as
# FlashAttention counts them (issue 18's targets on an H100: 250 forward, 200 backward in bf16).
(cd backend/cuda && "$root/$bin/cuda.test" -test.run XXX -test.bench Attention -test.benchtime 10x > "$work/bench-attention.log" 2>&1)
for dir in forward backward; do
  for variant in fp32/tiled tf32/tensor-core bf16/tensor-core bf16/tiled fp16/tensor-core; do
    line=$(grep "BenchmarkAttention/$dir/$variant" "$work/bench-attention.log" | head -1)
    [ -n "$line" ] && row "attention $dir $variant" "ok" "$(echo "$line" | awk '{printf "%.3f ms, %s TFLOP/s", $3/1e6, $5}')" \
      || row "attention $dir $variant" "FAIL" "$(tail -1 "$work/bench-attention.log")"
  done
done

# cuBLASLt: the algorithm picked by timing against the heuristic's first, on GPT-2 124M's bf16
# matmuls at B*T=16384 (TFLOP/s, heuristic -> tuned, per product).
(cd backend/cuda && "$root/$bin/cuda.test" -test.run XXX -test.bench MatmulTuning -test.benchtime 20x > "$work/bench-matmul.log" 2>&1)
for l in qkv attproj fc fcproj lmhead; do
  cells=""
  for p in fwd dinp dweight; do
    h=$(awk -v k="BenchmarkMatmulTuning/heuristic/$l/$p" 'index($1,k)==1 {print $5; exit}' "$work/bench-matmul.log")
    tu=$(awk -v k="BenchmarkMatmulTuning/tuned/$l/$p" 'index($1,k)==1 {print $5; exit}' "$work/bench-matmul.log")
    cells+="$p ${h:-?} -> ${tu:-?}; "
  done
  [ -n "$h" ] && row "bf16 matmul $l TFLOP/s" "ok" "$cells" || row "bf16 matmul $l" "FAIL" "$(tail -1 "$work/bench-matmul.log")"
done

# The classifier at 124M's shape (B*T=16384, Vp=50304): forward then backward kernels against the
# fused kernel (one pass over the logits), in ms and GB/s of the pair's logits traffic.
(cd backend/cuda && "$root/$bin/cuda.test" -test.run XXX -test.bench Classifier -test.benchtime 10x > "$work/bench-classifier.log" 2>&1)
for v in fp32/forward+backward fp32/fused bf16/forward+backward bf16/fused; do
  line=$(grep "BenchmarkClassifier/$v" "$work/bench-classifier.log" | head -1)
  [ -n "$line" ] && row "classifier $v" "ok" "$(echo "$line" | awk '{printf "%.3f ms, %s GB/s", $3/1e6, $5}')" \
    || row "classifier $v" "FAIL" "$(tail -1 "$work/bench-classifier.log")"
done

# int8 matmuls (dp4a) against cuBLASLt fp32 and bf16 at 124M's shapes: one token (GB/s of weight
# bytes: generation is memory-bound) and 1024 tokens (TOPS).
(cd backend/cuda && "$root/$bin/cuda.test" -test.run XXX -test.bench MatmulInt8 -test.benchtime 200x > "$work/bench-int8.log" 2>&1)
for N in 1 1024; do
  for s in C=768,OC=2304 C=3072,OC=768 C=768,OC=50304; do
    cells=""
    for k in int8 fp32 bf16; do
      cells+="$k $(awk -v key="BenchmarkMatmulInt8/N=$N/$s/$k" 'index($1,key)==1 {print $5, $6; exit}' "$work/bench-int8.log"); "
    done
    grep -q "BenchmarkMatmulInt8/N=$N/$s/int8" "$work/bench-int8.log" && row "matmul N=$N $s" "ok" "$cells" \
      || row "matmul int8 N=$N $s" "FAIL" "$(tail -1 "$work/bench-int8.log")"
  done
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
    local ms tok graphs launches launchms
    ms=$(grep -o '"ms_per_step": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    tok=$(grep -o '"tok_per_s": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    graphs=$(grep -o '"graphs": *"[^"]*"' "$log" | tail -1 | sed 's/.*: *"//; s/"$//')
    launches=$(grep -o '"launches": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    launchms=$(grep -o '"launch_ms": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    row "124M B16 T1024 $name" "ok" "$(printf '%.1f ms/step, %.0f tok/s' "${ms:-0}" "${tok:-0}")${launches:+; $launches launches/step, ${launchms} ms host}${graphs:+; graphs $graphs}"
  else
    row "124M B16 T1024 $name" "FAIL" "$(tail -1 "$log")"
  fi
}
for prec in fp32 tf32 bf16 fp16; do
  bench "gpt2go $prec" "$bin/gpt2go" bench --device cuda --precision $prec --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
done
bench "gpt2go bf16, GELU unfused" env GPT2GO_GELU_FUSION=0 "$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
bench "gpt2go bf16, no cuda graphs" env GPT2GO_CUDA_GRAPHS=0 "$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
bench "gpt2go bf16, a sync per step" env GPT2GO_CUDA_GRAPHS=0 GPT2GO_SYNC_STEPS=1 "$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
bench "gpt2go bf16, heuristic matmuls" env GPT2GO_MATMUL_TUNE=0 "$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 2 --steps 10 --json
"$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 1 --steps 2 --verbose > "$work/matmul-tuned.txt" 2>&1 \
  && row "bf16 step's matmul picks (one call each)" "ok" "$(grep -o 'one call of each shape.*' "$work/matmul-tuned.txt" || echo 'no table')" \
  || row "bf16 step's matmul picks" "FAIL" "$(tail -1 "$work/matmul-tuned.txt")"
if $py -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  bench "torch fp32" $py bench/torch_gpu.py --tf32 0 -B 16 -T 1024 --warmup-steps 2 --steps 10 --json
  bench "torch tf32" $py bench/torch_gpu.py --tf32 1 -B 16 -T 1024 --warmup-steps 2 --steps 10 --json
  bench "torch autocast bf16" $py bench/torch_gpu.py --autocast bf16 --tf32 1 -B 16 -T 1024 --warmup-steps 2 --steps 10 --json
else
  row "PyTorch peer" "SKIP" "no PyTorch with CUDA for $py"
fi

# Where the 124M bf16 step's time goes: the op table by shape, synced after every op. Its copy
# rows (UploadInt32: the tokens, targets and index) decide whether a separate copy stream would
# pay (docs/performance.md); its host-calls line counts the launches a graph replaces.
"$bin/gpt2go" profile --device cuda --precision bf16 --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 1 --steps 2 --by-shape \
  > "$work/profile-124m.txt" 2>&1 && {
  row "profile 124M bf16: token uploads" "ok" "$(awk '$1 == "UploadInt32" {printf "%s: %s calls, %s ms, %s; ", $2, $3, $4, $6}' "$work/profile-124m.txt" | head -c 160)"
  row "profile 124M bf16: host calls" "ok" "$(grep -m1 'per step, the host queued' "$work/profile-124m.txt" || echo 'not counted')"
  row "profile 124M bf16: hints" "ok" "$(grep -c '^hint:' "$work/profile-124m.txt") (in profile-124m.txt)"
} || row "profile 124M B16 T1024" "FAIL" "$(tail -1 "$work/profile-124m.txt")"

# Only pip's nvidia-* wheels: the CUDA toolkit's folders (/usr/local/cuda*) renamed for one run and
# LD_LIBRARY_PATH emptied, so NVRTC and cuBLASLt must come from site-packages/nvidia/*/lib.
wheels=$($py -c 'import nvidia, os; print(" ".join(sorted(os.listdir(os.path.dirname(nvidia.__path__[0]) + "/nvidia"))))' 2>/dev/null)
if [ -n "$wheels" ]; then
  hidden=()
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -e "$d" ] && [ "${d%.hidden}" = "$d" ] && mv "$d" "$d.hidden" 2>/dev/null && hidden+=("$d")
  done
  if LD_LIBRARY_PATH= "$bin/gpt2go" bench --device cuda --precision bf16 --model gpt2 --batch-size 4 --seq-len 256 \
      --warmup-steps 1 --steps 3 --json > "$work/wheels-only.log" 2>&1; then
    row "124M bf16 with only pip's nvidia wheels" "ok" "hid ${hidden[*]:-nothing}; wheels: $wheels"
  else
    row "124M bf16 with only pip's nvidia wheels" "FAIL" "$(tail -1 "$work/wheels-only.log" | cut -c1-150)"
  fi
  for d in "${hidden[@]}"; do mv "$d.hidden" "$d"; done
else
  row "only pip's nvidia wheels" "SKIP" "no nvidia-* wheels for $py"
fi

# 4. The command line on the GPU: --device auto picks it and its default precision (bf16 from
# sm_80, fp16 before), --tf32 alone runs tf32 (fp32 storage, TF32 matmuls), sample and eval run on
# it (eval's loss matches the CPU's), and a model that cannot fit stops before allocating, with a
# clear message.
if "$bin/gpt2go" train --data "${GPT2GO_SHAKESPEARE:-go}" --steps 20 --log-every 10 --sample-every 0 --ckpt-every 0 \
    --force --cache-dir "$work/cache" --out "$work/auto" > "$work/auto.log" 2>&1; then
  row "train --device auto (default)" "ok" "$(grep -m1 -o 'cuda:[0-9][^,]*' "$work/auto.log" || echo 'did not say cuda'); $(grep -m1 -o 'precision: [a-z0-9]*' "$work/auto.log")"
else
  row "train --device auto (default)" "FAIL" "$(tail -1 "$work/auto.log")"
fi
if "$bin/gpt2go" train --data "${GPT2GO_SHAKESPEARE:-go}" --tf32 --steps 20 --log-every 10 --sample-every 0 --ckpt-every 0 \
    --force --cache-dir "$work/cache" --out "$work/tf32" > "$work/tf32.log" 2>&1 && grep -q 'precision: tf32' "$work/tf32.log"; then
  row "train --tf32 (fp32 storage, TF32 matmuls)" "ok" "$(grep -m1 -o 'precision: [a-z0-9]*' "$work/tf32.log")"
else
  row "train --tf32 (fp32 storage, TF32 matmuls)" "FAIL" "$(grep -m1 -o 'precision: [a-z0-9]*' "$work/tf32.log" || tail -1 "$work/tf32.log")"
fi
if "$bin/gpt2go" bench --device cuda --model gpt2-xl --batch-size 512 --seq-len 1024 --steps 1 > "$work/oom.log" 2>&1; then
  row "a model too big for the GPU" "FAIL" "gpt2-xl at B=512 T=1024 did not stop"
else
  row "a model too big for the GPU" "ok" "$(tail -1 "$work/oom.log" | cut -c1-150)"
fi

# KV-cached generation of GPT-2 124M (one training step's checkpoint on the embedded data), 256 new
# tokens: fp32 and bf16 weights against int8 (dp4a), tok/s of the generation; and greedy int8 text
# on the GPU against the CPU's (info: the float ops around the int8 products round differently,
# and a one-step model's logits are near ties, so the texts may part).
if "$bin/gpt2go" train --model gpt2 --batch-size 1 --seq-len 64 --steps 1 --sample-every 0 --eval-every 0 --ckpt-every 1 \
    --force --cache-dir "$work/cache" --out "$work/m124" > "$work/m124.log" 2>&1; then
  for v in "fp32:--precision fp32" "bf16:--precision bf16" "int8 fp32:--precision fp32 --int8" "int8 bf16:--precision bf16 --int8"; do
    name=${v%%:*} flags=${v#*:} log=$work/sample-124m-${name// /-}.log
    if "$bin/gpt2go" sample --ckpt "$work/m124" --device cuda $flags --tokens 256 --prompt "func main() {" > "$log" 2>&1; then
      row "sample 124M KV cache, cuda $name" "ok" "$(grep -o 'then [0-9]* tokens.*tok/s)' "$log" | tail -1) $(grep -o 'int8 weights: [0-9.]* MB' "$log")"
    else
      row "sample 124M KV cache, cuda $name" "FAIL" "$(tail -1 "$log" | cut -c1-150)"
    fi
  done
  for dev in cuda cpu; do
    "$bin/gpt2go" sample --ckpt "$work/m124" --device $dev --precision fp32 --int8 --temperature 0 --tokens 24 --prompt "func main() {" \
      > "$work/greedy-int8-$dev.log" 2>/dev/null || echo "FAILED" >> "$work/greedy-int8-$dev.log"
  done
  row "greedy int8 text, cuda vs cpu" "info" "$(cmp "$work/greedy-int8-cuda.log" "$work/greedy-int8-cpu.log" 2>&1 | head -1 | sed 's|.*/||' || true)$(cmp -s "$work/greedy-int8-cuda.log" "$work/greedy-int8-cpu.log" && echo 'the same bytes')"
else
  row "sample 124M KV cache" "FAIL" "training the checkpoint: $(tail -1 "$work/m124.log" | cut -c1-150)"
fi

# The BERT encoder end to end: char-level masked-language modelling on Shakespeare, 300 steps of
# scripts/shakespeare-bert.sh's model, on the CPU in fp32 (the reference) and on the GPU in fp32,
# bf16 and fp16; the same seed masks the same positions, so the val losses must agree closely.
if [ -n "$GPT2GO_SHAKESPEARE" ]; then
  "$bin/gpt2go" prepare --input "$GPT2GO_SHAKESPEARE" --out "$work/bert-data" --tokenizer char --bert-specials > "$work/bert-prepare.log" 2>&1
  bt=(train --arch bert --data "$work/bert-data" --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --seq-len 64
      --batch-size 32 --steps 300 --pre-ln --lr 3e-3 --min-lr 1e-4 --warmup 30 --weight-decay 0.01 --beta2 0.99
      --eps 1e-6 --grad-clip 1 --shuffle=false --eval-every 100 --eval-batches 10 --ckpt-every 0 --log-every 50
      --force --tensorboard=false)
  bvals() { grep -o '"val_loss":[0-9.]*' "$1/log.jsonl" 2>/dev/null | cut -d: -f2; }
  for run in cpu:fp32 cuda:fp32 cuda:bf16 cuda:fp16; do
    dev=${run%%:*} prec=${run#*:} dir=$work/bert-$dev-$prec
    start=$(date +%s)
    if "$bin/gpt2go" "${bt[@]}" --device $dev --precision $prec --out "$dir" > "$dir.log" 2>&1; then
      ms=$(grep -o '"ms":[0-9.]*' "$dir/log.jsonl" | tail -5 | cut -d: -f2 | sort -g | sed -n 3p)
      if [ "$run" = cpu:fp32 ]; then
        row "bert char 300 steps, cpu fp32" "ok" "val loss $(bvals "$dir" | tr '\n' ' ')(${ms:-?} ms/step)"
      else
        worst=$(paste <(bvals "$dir") <(bvals "$work/bert-cpu-fp32") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.4f", m}')
        st=$(awk -v w="$worst" 'BEGIN {print (w <= 0.05) ? "ok" : "FAIL"}')
        row "bert char 300 steps, cuda $prec" "$st" "val loss $(bvals "$dir" | tr '\n' ' ')max |val - cpu| $worst (<= 0.05), ${ms:-?} ms/step"
      fi
    else
      row "bert char, $dev $prec" "FAIL" "$(tail -1 "$dir.log" | cut -c1-150)"
    fi
  done
fi
# BERT-base's training step at B=32 T=512 (random tokens, its MLM head on the masked 15%), by
# bench --arch bert: the encoder's speed on the GPU in fp32 and bf16.
for prec in fp32 bf16; do
  log=$work/bench-bert-base-$prec.log
  if "$bin/gpt2go" bench --device cuda --arch bert --model bert-base --block-size 512 --batch-size 32 --seq-len 512 \
       --precision $prec --warmup-steps 2 --steps 5 --json > "$log" 2>&1; then
    ms=$(grep -o '"ms_per_step": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    tok=$(grep -o '"tok_per_s": *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
    row "bert-base B32 T512 $prec" "ok" "$(printf '%.1f ms/step, %.0f tok/s' "${ms:-0}" "${tok:-0}")"
  else
    row "bert-base B32 T512 $prec" "FAIL" "$(tail -1 "$log" | cut -c1-150)"
  fi
done

# 5. Data parallel through NCCL: torchrun starts one rank on the GPU, which goes through the whole
# communicator path (DDP, then ZeRO-1); its losses must equal a plain run's bit for bit (the grad
# norm is the in-order sum of per-4096-block sums, SumSquaresBlocks, with or without shards).
# Then two ranks on the one GPU, if NCCL lets them.
if "$py" -c 'import torch.distributed.run' 2>/dev/null && [ -n "$GPT2GO_SHAKESPEARE" ]; then
  dp=(train --data "$GPT2GO_SHAKESPEARE" --device cuda --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --seq-len 64
      --batch-size 12 --steps 30 --eval-every 15 --eval-batches 4 --sample-tokens 0 --ckpt-every 0 --log-every 10
      --cache-dir "$work/cache" --force --tensorboard=false)
  losses() { grep -o '"loss":[^,]*\|"val_loss":[^,}]*' "$1/log.jsonl" 2>/dev/null; }
  "$bin/gpt2go" "${dp[@]}" --out "$work/dp-plain" > "$work/dp-plain.log" 2>&1
  # DDP sums each layer's gradient on a second stream during backward (--overlap-grads, the
  # default); =false sums the whole gradient after backward on the main stream.
  for mode in "--zero 0" "--zero 0 --overlap-grads=false" "--zero 1"; do
    tag=$(echo "$mode" | sed 's/[^a-z0-9]//g')
    if "$py" -m torch.distributed.run --no-python --standalone --nproc-per-node=1 "$bin/gpt2go" "${dp[@]}" $mode \
        --out "$work/dp-$tag" > "$work/dp-$tag.log" 2>&1; then
      same=$(cmp -s <(losses "$work/dp-plain") <(losses "$work/dp-$tag") && echo "equal" || echo "DIFFERENT")
      st=ok; [ "$same" != equal ] && st=FAIL
      row "torchrun 1 rank, NCCL, $mode" "$st" "losses vs a plain run: $same; $(grep -m1 -o 'NCCL [^,]*' "$work/dp-$tag.log")"
    else
      row "torchrun 1 rank, NCCL, $mode" "FAIL" "$(tail -1 "$work/dp-$tag.log" | cut -c1-150)"
    fi
  done
  # Two ranks on the one GPU, through torchrun --nproc-per-node=2 with its agent holding
  # MASTER_PORT (static rendezvous), so rank 0 hands NCCL's id out beside it, on MASTER_PORT+1.
  # Each rank sees one GPU and opens it (ordinal 0). NCCL refuses two ranks on one GPU
  # ("Duplicate GPU") unless it takes them for ranks of different hosts (NCCL_HOSTID per rank,
  # over the socket transport) or, from NCCL 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 allows it: a
  # refusal is reported as such, not failed. A way that works is compared with one process's
  # --grad-accum 2 at the same global batch, in fp32 (NCCL's sum of 2 ranks is one float32
  # addition per element, as accumulating 2 micro-batches is).
  dp2=(train --data "$GPT2GO_SHAKESPEARE" --device cuda --precision fp32 --n-layer 4 --n-head 4 --n-embd 128
       --block-size 64 --seq-len 64 --batch-size 12 --steps 30 --eval-every 15 --eval-batches 4 --sample-tokens 0
       --ckpt-every 0 --log-every 10 --cache-dir "$work/cache" --force --tensorboard=false --dist-timeout 30s)
  nums() { grep -o '"loss":[^,]*\|"val_loss":[^,}]*' "$1/log.jsonl" 2>/dev/null | cut -d: -f2; }
  "$bin/gpt2go" "${dp2[@]}" --grad-accum 2 --out "$work/dp2-accum" > "$work/dp2-accum.log" 2>&1 \
    || row "1 process --grad-accum 2 (the reference)" "FAIL" "$(tail -1 "$work/dp2-accum.log" | cut -c1-150)"
  # NCCL_HOSTID must differ per rank, and torchrun gives every rank the same environment.
  # shellcheck disable=SC2016 # $LOCAL_RANK and $@ are the wrapper's, expanded when it runs
  printf '#!/bin/sh\nNCCL_HOSTID=gpt2go-check-$LOCAL_RANK exec "$@"\n' > "$work/hostid.sh" && chmod +x "$work/hostid.sh"
  port=$((29600 + RANDOM % 300 * 2))
  for way in plain hostid multirank; do
    case $way in
      plain) what="as is"; wrap=(); nenv=() ;;
      hostid) what="NCCL_HOSTID per rank"; wrap=("$work/hostid.sh")
              nenv=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo) ;;
      multirank) what="MULTI_RANK_GPU_ENABLE"; wrap=(); nenv=(NCCL_MULTI_RANK_GPU_ENABLE=1) ;;
    esac
    port=$((port + 2))
    log=$work/dp2-$way.log
    if env NCCL_DEBUG=WARN "${nenv[@]}" timeout 120 "$py" -m torch.distributed.run --no-python --nproc-per-node=2 \
        --master-addr=127.0.0.1 --master-port=$port "${wrap[@]}" "$bin/gpt2go" "${dp2[@]}" --out "$work/dp2-$way" > "$log" 2>&1; then
      diff=$(paste <(nums "$work/dp2-$way") <(nums "$work/dp2-accum") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d; n++} END {printf "%d numbers, max |diff| %g", n, m}')
      if cmp -s <(nums "$work/dp2-$way") <(nums "$work/dp2-accum") && [ -n "$(nums "$work/dp2-accum")" ]; then st=ok; same="the same bits"
      else st=$(echo "$diff" | awk '{print ($NF <= 1e-3 && $1 > 0) ? "close" : "FAIL"}'); same=$diff; fi
      row "torchrun x2 on 1 GPU, $what" "$st" "losses vs 1 process --grad-accum 2: $same; $(grep -m1 -o 'NCCL [^,]*' "$log")"
    elif grep -q 'Duplicate GPU\|ncclCommInitRank failed\|ncclInvalidUsage\|ncclSystemError\|ncclInternalError\|ncclRemoteError' "$log"; then
      row "torchrun x2 on 1 GPU, $what" "refused" "refused by NCCL: $(grep -m1 -o 'Duplicate GPU.*\|ncclCommInitRank failed.*' "$log" | cut -c1-140)"
    else
      row "torchrun x2 on 1 GPU, $what" "FAIL" "$(grep -m1 'gpt2go train:' "$log" | cut -c1-150 || tail -1 "$log" | cut -c1-150)"
    fi
  done
  # Whatever NCCL said, the id must have gone round beside torchrun's agent.
  if grep -q 'cannot listen on\|no NCCL id from rank 0\|did not fetch the NCCL id' "$work"/dp2-*.log; then
    row "torchrun x2: NCCL id beside the agent" "FAIL" "$(grep -h -m1 'cannot listen on\|no NCCL id\|did not fetch' "$work"/dp2-*.log | head -1 | cut -c1-150)"
  else
    row "torchrun x2: NCCL id beside the agent" "ok" "agent on MASTER_PORT, id on MASTER_PORT+1; no exchange error in dp2-*.log"
  fi
else
  row "torchrun + NCCL" "SKIP" "no torch.distributed for $py or no Shakespeare text"
fi
fi # part 1

# ---------------------------------------------------------------------------------------------
# Part 2. Shakespeare char-level, the same seed and recipe: the CPU in fp32 is the reference; the
# GPU in fp32, bf16 and fp16 must end within 0.03 of its validation loss at every evaluation.
if p2 && [ -n "$GPT2GO_SHAKESPEARE" ]; then
  steps=2000; [ "${QUICK:-0}" = 1 ] && steps=300
  common=(train --data "$GPT2GO_SHAKESPEARE" --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --seq-len 64
          --batch-size 12 --steps $steps --lr 1e-3 --min-lr 1e-4 --lr-schedule cosine --warmup 100 --beta2 0.99
          --weight-decay 0.1 --grad-clip 1 --shuffle --eval-every 250 --eval-batches 100 --sample-every 0
          --ckpt-every 0 --log-every 100 --force --cache-dir "$work/cache")
  vals() { grep -o '"val_loss":[0-9.]*' "$1/log.jsonl" 2>/dev/null | cut -d: -f2; }
  for run in cpu:fp32 cuda:fp32 cuda:bf16 cuda:fp16; do
    dev=${run%%:*} prec=${run#*:} dir=$work/char-$dev-$prec
    start=$(date +%s)
    if "$bin/gpt2go" "${common[@]}" --device $dev --precision $prec --out "$dir" > "$dir.log" 2>&1; then
      v=$(vals "$dir" | tail -1)
      if [ "$run" = cpu:fp32 ]; then
        row "shakespeare char $steps steps, cpu fp32" "ok" "final val loss ${v:-?}, $(( $(date +%s) - start )) s"
      else
        worst=$(paste <(vals "$dir") <(vals "$work/char-cpu-fp32") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.4f", m}')
        st=$(awk -v w="$worst" 'BEGIN {print (w <= 0.03) ? "ok" : "FAIL"}')
        row "shakespeare char $steps steps, cuda $prec" "$st" "final val loss ${v:-?}, max |val - cpu fp32| $worst (<= 0.03), $(( $(date +%s) - start )) s"
      fi
    else
      row "shakespeare char, $dev $prec" "FAIL" "$(tail -1 "$dir.log")"
    fi
  done
  paste <(echo cpu-fp32; vals "$work/char-cpu-fp32") <(echo cuda-fp32; vals "$work/char-cuda-fp32") \
        <(echo cuda-bf16; vals "$work/char-cuda-bf16") <(echo cuda-fp16; vals "$work/char-cuda-fp16") > "$work/char-val-curves.txt"
  ln -sfn "$work/char-cuda-bf16" "$work/char-cuda"
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
elif p2; then
  row "shakespeare char" "SKIP" "no tinyshakespeare.txt (set GPT2GO_SHAKESPEARE)"
fi

# GPT-2 124M on GPT-2-BPE Tiny Shakespeare, B=16 T=1024, 300 steps, in TF32, bf16 and fp16: every
# evaluation's validation loss within 1% of TF32's; the curves drawn into one picture.
if p2 && [ -n "$GPT2GO_SHAKESPEARE" ]; then
  if "$bin/gpt2go" prepare --input "$GPT2GO_SHAKESPEARE" --tokenizer gpt2 --out "$work/ts-bpe" > "$work/prepare-bpe.log" 2>&1; then
    bvals() { grep -o '"val_loss":[0-9.]*' "$1/log.jsonl" 2>/dev/null | cut -d: -f2; }
    for prec in tf32 bf16 fp16; do
      dir=$work/bpe-124m-$prec
      start=$(date +%s)
      if "$bin/gpt2go" train --data "$work/ts-bpe" --model gpt2 --batch-size 16 --seq-len 1024 --steps 300 --lr 6e-4 \
          --min-lr 6e-5 --warmup 30 --weight-decay 0.1 --grad-clip 1 --eval-every 50 --eval-batches 2 --sample-every 0 \
          --ckpt-every 0 --log-every 25 --device cuda --precision $prec --force --out "$dir" > "$dir.log" 2>&1; then
        v=$(bvals "$dir" | tail -1)
        if [ $prec = tf32 ]; then
          row "124M BPE shakespeare 300 steps, tf32" "ok" "final val loss ${v:-?}, $(( $(date +%s) - start )) s"
        else
          worst=$(paste <(bvals "$dir") <(bvals "$work/bpe-124m-tf32") | awk '{d=($1-$2)/$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.4f", m}')
          st=$(awk -v w="$worst" 'BEGIN {print (w <= 0.01) ? "ok" : "FAIL"}')
          row "124M BPE shakespeare 300 steps, $prec" "$st" "final val loss ${v:-?}, max rel diff to tf32 $worst (<= 0.01), $(( $(date +%s) - start )) s"
        fi
      else
        row "124M BPE shakespeare, $prec" "FAIL" "$(tail -1 "$dir.log")"
      fi
    done
    "$bin/gpt2go" plot --what loss --title "GPT-2 124M, BPE Tiny Shakespeare: tf32, bf16, fp16" --out "$work/bpe-124m-precisions.png" \
      "$work/bpe-124m-tf32" "$work/bpe-124m-bf16" "$work/bpe-124m-fp16" > "$work/plot.log" 2>&1 \
      || row "plot of the 124M curves" "FAIL" "$(tail -1 "$work/plot.log")"
  else
    row "prepare GPT-2 BPE shakespeare" "FAIL" "$(tail -1 "$work/prepare-bpe.log")"
  fi
fi

# Hugging Face interchange (issue 17): transformers loads gpt2go's export and gives the same
# logits, loss and greedy text, and gpt2go reads what transformers' save_pretrained writes;
# scripts/hf-check.py prints PASS or FAIL per check. It needs transformers beside PyTorch.
if p2 && [ -n "$GPT2GO_SHAKESPEARE" ]; then
  if "$py" -c 'import transformers' 2>/dev/null; then
    if "$py" scripts/hf-check.py --text "$GPT2GO_SHAKESPEARE" --gpt2go "$bin/gpt2go" --out "$work/hf" > "$work/hf-check.log" 2>&1; then
      row "transformers vs gpt2go (hf-check.py)" "ok" "$(grep -c '^PASS' "$work/hf-check.log") checks passed"
    else
      row "transformers vs gpt2go (hf-check.py)" "FAIL" "$( (grep '^FAIL' "$work/hf-check.log" || tail -1 "$work/hf-check.log") | head -1 | cut -c1-150)"
    fi
  else
    row "transformers vs gpt2go (hf-check.py)" "SKIP" "no transformers for $py"
  fi
fi

# ---------------------------------------------------------------------------------------------
# Part 3. The speed ladder (issue 18): GPT-2 124M at B=16 T=1024, each rung in its own process,
# PyTorch's beside it; the table goes to ladder.txt and its last line to the summary.
if p3; then
  torchpy=$py
  $py -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || torchpy=none
  if "$bin/gpt2go" bench --ladder --device cuda --model gpt2 --batch-size 16 --seq-len 1024 --warmup-steps 3 --steps 10 \
      --python "$torchpy" > "$work/ladder.txt" 2> "$work/ladder.log"; then
    row "speed ladder 124M B16 T1024" "ok" "$(grep '^best' "$work/ladder.txt" || grep 'tensor-core' "$work/ladder.txt")"
  else
    row "speed ladder 124M B16 T1024" "FAIL" "$(tail -1 "$work/ladder.log")"
  fi
fi

finish
