#!/usr/bin/env python3
"""PyTorch GPU peer for gpt2go's CUDA figures (scripts/gpu-check.sh runs it).

Full GPT-2 training steps (zero_grad, forward, backward, clip_grad_norm_(1.0), torch.optim.AdamW
with its defaults) in eager PyTorch on one GPU, fp32 storage, matmuls in exact fp32 (--tf32 0) or
on TF32 tensor cores (--tf32 1), on random tokens; the model is bench/torch_gpt.py's, with
F.scaled_dot_product_attention (--sdpa 1, the default: what nanoGPT uses on a GPU) or the
materialised (T, T) scores (--sdpa 0). --autocast bf16 runs the forward under
torch.autocast(dtype=torch.bfloat16) (fp32 weights and optimizer, bf16 matmuls and activations
where autocast chooses them: PyTorch's usual mixed precision, gpt2go's --precision bf16 peer).
--compile 1 wraps the model in torch.compile (compiled during the warm-up steps, which are not
timed), --fused-adamw 1 gives AdamW fused=True, and --vocab-pad 0 keeps the vocabulary at 50257
instead of padding it to 50304: with all of them (and --autocast bf16 --sdpa 1) this is
build-nanogpt's recipe, the rungs of its speed road one flag at a time (`gpt2go bench --ladder`).
Times are CUDA-synchronised wall times of whole steps;
prints one summary line and, with --json, one JSON object.

    python3 bench/torch_gpu.py --tf32 1 -B 16 -T 1024 --steps 10 --json
    python3 bench/torch_gpu.py --autocast bf16 -B 16 -T 1024 --steps 10 --json
    python3 bench/torch_gpu.py --autocast bf16 --compile 1 --fused-adamw 1 -B 16 -T 1024 --json
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from torch_gpt import GPT, Config, train_step  # noqa: E402


def autocast_step(model, opt, x, y, dtype):
    """train_step with the forward (and so the loss) under torch.autocast; backward, clipping and
    AdamW outside it, as PyTorch's mixed-precision recipe has it (bf16 needs no loss scaling)."""
    opt.zero_grad(set_to_none=False)
    with torch.autocast(device_type="cuda", dtype=dtype):
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2", help="gpt2 (124M) or empty for the dimensions below")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("-B", "--batch-size", type=int, default=16)
    p.add_argument("-T", "--seq-len", type=int, default=1024)
    p.add_argument("--tf32", type=int, default=1, help="1: TF32 matmuls, 0: exact fp32")
    p.add_argument("--sdpa", type=int, default=1, help="1: F.scaled_dot_product_attention, 0: explicit scores")
    p.add_argument("--autocast", default="none", choices=["none", "bf16"],
                   help="bf16: forward under torch.autocast(dtype=torch.bfloat16)")
    p.add_argument("--compile", type=int, default=0, help="1: torch.compile the model")
    p.add_argument("--fused-adamw", type=int, default=0, help="1: torch.optim.AdamW(fused=True)")
    p.add_argument("--vocab-pad", type=int, default=1, help="1: vocabulary padded to 50304, 0: 50257")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpu.py: PyTorch sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
    torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    padded = 50304 if args.vocab_pad else 50257
    if args.model == "gpt2":
        cfg = Config(12, 12, 768, 1024, 50257, padded)
    else:
        cfg = Config(args.n_layer, args.n_head, args.n_embd, 1024, 50257, padded)
    cfg.sdpa = bool(args.sdpa)
    B, T = args.batch_size, args.seq_len
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    model = GPT(cfg).to(dev)
    opt = model.optimizer(fused=True) if args.fused_adamw else model.optimizer()
    if args.compile:
        model = torch.compile(model)
    x = torch.randint(cfg.vocab_size, (B, T), device=dev)
    y = torch.randint(cfg.vocab_size, (B, T), device=dev)
    times = []
    for i in range(args.warmup_steps + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if args.autocast == "bf16":
            loss = autocast_step(model, opt, x, y, torch.bfloat16)
        else:
            loss = train_step(model, opt, x, y)
        torch.cuda.synchronize()
        if i >= args.warmup_steps:
            times.append((time.perf_counter() - t0) * 1000)
    ms = statistics.median(times)
    res = {
        "peer": "torch", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "tf32": bool(args.tf32), "sdpa": bool(args.sdpa), "autocast": args.autocast, "compile": bool(args.compile),
        "fused_adamw": bool(args.fused_adamw), "padded_vocab": padded, "batch_size": B, "seq_len": T,
        "steps": args.steps, "step_ms": times, "ms_per_step": ms, "min_ms": min(times),
        "tok_per_s": B * T / (ms / 1000), "loss": loss.item(),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
    }
    print(f"torch_gpu: {ms:.1f} ms/step (median of {args.steps}), {res['tok_per_s']:.0f} tok/s, "
          f"tf32={res['tf32']} sdpa={res['sdpa']} autocast={args.autocast} compile={res['compile']} "
          f"fused_adamw={res['fused_adamw']} vocab={padded} B={B} T={T}, peak {res['peak_mem_gib']:.1f} GiB, {res['device']}")
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
