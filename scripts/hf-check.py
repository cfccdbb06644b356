#!/usr/bin/env python3
"""Check gpt2go's Hugging Face GPT-2 export and import against transformers itself.

Needs torch and transformers (pip install torch transformers), and a gpt2go binary
(go build ./cmd/gpt2go, or .gpubin/gpt2go from scripts/gpu-build.sh). The
development machine has no transformers, so this runs elsewhere, e.g. on the GPU
machine. It checks, printing one line per check and exiting non-zero on failure:

  1. export: `gpt2go export --format hf` writes a folder that
     GPT2LMHeadModel.from_pretrained and AutoTokenizer.from_pretrained load;
  2. logits: transformers' logits for a batch of the text's tokens equal those of
     gpt2go's reference GPT-2 (tools/reference/gen_hf_fixture.py's forward, which
     `go test ./hf` matches gpt2go against) on the exported weights, to 1e-4;
  3. tokenizer and loss: transformers' tokenizer gives as many tokens as gpt2go's
     for the text, and its loss over the text, computed as `gpt2go eval --text`
     does (end-of-text token first, non-overlapping windows of --seq-len), equals
     gpt2go's on the exported folder (read back with --init), to 1e-4;
  4. greedy text: `gpt2go sample --temperature 0` continues a prompt with the
     same text as transformers' greedy generate;
  5. import: a model transformers saves with save_pretrained (its own names and
     layout) gives gpt2go the same loss.

Usage:

  scripts/hf-check.py --text some.txt [--init MODEL | --ckpt RUN] [--gpt2go BIN] [--out DIR]

Without --init or --ckpt it first trains a small GPT-2-vocabulary model on the
text for a few steps (prepare --tokenizer gpt2, train), so the exported folder
has GPT-2's tokenizer files. --init takes whatever gpt2go's --init takes: an
llm.c file, a Hugging Face folder, or hf:openai-community/gpt2 where the Hub is
reachable. gpt2go runs with --device cpu so that both sides compute in exact fp32.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import gen_hf_fixture  # noqa: E402  gpt2go's reference GPT-2 in Hugging Face's layout

TOL = 1e-4
failures = []


def report(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    if not ok:
        failures.append(name)


def gpt2go(binary, *args):
    cmd = [binary, *args]
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def read_safetensors(path):
    """The tensors of a safetensors file, by name, as float32 torch tensors."""
    import struct

    import numpy as np

    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[a:b], dtype=np.dtype(dtypes[info["dtype"]]).newbyteorder("<"))
        out[name.removeprefix("transformer.")] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]))
    return out


def text_loss(model, ids, seq_len):
    """Mean cross-entropy over ids as gpt2go's eval --text computes it: non-overlapping windows
    of seq_len inputs, every token but the first predicted once."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, seq_len):
            window = ids[start : start + seq_len + 1]
            inputs = torch.tensor([window[:-1]])
            targets = torch.tensor(window[1:])
            logits = model(inputs).logits[0]
            total += F.cross_entropy(logits, targets, reduction="sum").item()
            count += len(targets)
    return total / count, count


def load_transformers(path):
    from transformers import GPT2LMHeadModel

    try:
        model = GPT2LMHeadModel.from_pretrained(path, attn_implementation="eager")
    except TypeError:  # transformers older than 4.36
        model = GPT2LMHeadModel.from_pretrained(path)
    return model.float().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, help="a text file (English, a few kB or more)")
    ap.add_argument("--init", help="pretrained weights for gpt2go --init")
    ap.add_argument("--ckpt", help="a gpt2go run or checkpoint")
    ap.add_argument("--gpt2go", default=shutil.which("gpt2go") or os.path.join(ROOT, ".gpubin", "gpt2go"))
    ap.add_argument("--out", default=None, help="work folder (default: a temp folder)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--prompt", default="The meaning of life is")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    work = args.out or tempfile.mkdtemp(prefix="hf-check-")
    os.makedirs(work, exist_ok=True)
    source = ["--init", args.init] if args.init else ["--ckpt", args.ckpt] if args.ckpt else None
    if source is None:
        data = os.path.join(work, "data")
        run = os.path.join(work, "run")
        gpt2go(args.gpt2go, "prepare", "--input", args.text, "--out", data, "--tokenizer", "gpt2", "--val-fraction", "0.1")
        gpt2go(args.gpt2go, "train", "--data", data, "--out", run, "--force", "--n-layer", "2", "--n-head", "2",
               "--n-embd", "64", "--block-size", "128", "--seq-len", "64", "--batch-size", "4", "--steps", "30",
               "--pad-vocab", "128", "--device", "cpu", "--eval-every", "0", "--sample-every", "0")
        source = ["--ckpt", run]

    # 1. export
    export = os.path.join(work, "export")
    print(gpt2go(args.gpt2go, "export", *source, "--format", "hf", "--out", export), end="")
    model = load_transformers(export)
    tok = AutoTokenizer.from_pretrained(export)
    cfg = model.config
    report("export loads", True, f"GPT2LMHeadModel n_layer {cfg.n_layer} n_head {cfg.n_head} n_embd {cfg.n_embd} vocab {cfg.vocab_size}; {type(tok).__name__}")

    text = open(args.text, encoding="utf-8").read()
    ids = [tok.eos_token_id] + tok.encode(text)
    T = min(args.seq_len, cfg.n_positions)

    # 2. logits: transformers vs gpt2go's reference forward over the exported weights
    batch = torch.tensor([ids[1 : T + 1], ids[T + 1 : 2 * T + 1]])
    with torch.no_grad():
        got = model(batch).logits
        want = gen_hf_fixture.forward(read_safetensors(os.path.join(export, "model.safetensors")), batch, cfg.n_layer, cfg.n_head)
    diff = (got - want).abs()
    bad = (diff > TOL) & (diff > TOL * want.abs())
    report("logits", not bad.any().item(), f"max abs diff {diff.max().item():.2e} over {got.numel()} logits (tolerance {TOL})")

    # 3. tokenizer and loss: transformers vs gpt2go eval --text on the exported folder
    loss, count = text_loss(model, ids, T)
    res = json.loads(gpt2go(args.gpt2go, "eval", "--init", export, "--text", args.text, "--seq-len", str(T), "--json", "--device", "cpu"))
    report("token count", res["tokens"] == count, f"gpt2go {res['tokens']}, transformers {count}")
    report("text loss", abs(res["loss"] - loss) <= TOL * max(1.0, loss), f"gpt2go {res['loss']:.6f}, transformers {loss:.6f}")

    # 4. greedy continuation
    n = 16
    out = gpt2go(args.gpt2go, "sample", "--init", export, "--prompt", args.prompt, "--tokens", str(n), "--temperature", "0", "--device", "cpu")
    with torch.no_grad():
        prompt_ids = torch.tensor([tok.encode(args.prompt)])
        gen = model.generate(prompt_ids, max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id)
    want_text = tok.decode(gen[0])
    got_text = out.rstrip("\n")
    report("greedy text", got_text == want_text, f"gpt2go {got_text!r}, transformers {want_text!r}")

    # 5. import what transformers saves
    saved = os.path.join(work, "saved")
    model.save_pretrained(saved, safe_serialization=True)
    tok.save_pretrained(saved)
    res = json.loads(gpt2go(args.gpt2go, "eval", "--init", saved, "--text", args.text, "--seq-len", str(T), "--json", "--device", "cpu"))
    report("save_pretrained -> gpt2go", abs(res["loss"] - loss) <= TOL * max(1.0, loss), f"gpt2go {res['loss']:.6f}, transformers {loss:.6f}")

    print(f"\n{'all checks passed' if not failures else 'FAILED: ' + ', '.join(failures)} (files in {work})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
