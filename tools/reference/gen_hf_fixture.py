#!/usr/bin/python3
"""Generate the Hugging Face GPT-2 fixture that hf/'s tests load with --init.

transformers is not needed (nor installed on the development machine): this is
gpt2go's own GPT-2 in torch, written with Hugging Face's module names and its
Conv1D layout, so its state dict is what GPT2LMHeadModel's would be. Sizes are
tiny and odd on purpose (V=99, C=36, NH=3 so HS=12, L=2, n_positions=20);
every LayerNorm and bias is perturbed so that a swapped or mis-transposed
tensor changes the logits. It writes:

  hf/testdata/tiny/config.json
      GPT-2's config.json fields (model_type "gpt2", n_embd, n_layer, n_head,
      n_positions, n_ctx, vocab_size, layer_norm_epsilon 1e-5,
      activation_function "gelu_new", ...).

  hf/testdata/tiny/model.safetensors
      The weights in the layout of the Hub's older GPT-2 files
      (openai-community/gpt2's model.safetensors): names without the
      "transformer." prefix, no lm_head.weight (tied to wte), and the
      attention buffers h.N.attn.bias (1,1,n_positions,n_positions) (the causal
      mask) and h.N.attn.masked_bias () that those files carry. Metadata
      {"format": "pt"}, as transformers writes and requires. Conv1D weights are
      (in, out): y = x @ W + b.
        wte.weight (V,C)  wpe.weight (n_positions,C)
        h.N.ln_1.weight/bias (C)
        h.N.attn.c_attn.weight (C,3C) .bias (3C)   output columns [q | k | v]
        h.N.attn.c_proj.weight (C,C)  .bias (C)
        h.N.ln_2.weight/bias (C)
        h.N.mlp.c_fc.weight (C,4C)    .bias (4C)
        h.N.mlp.c_proj.weight (4C,C)  .bias (C)
        ln_f.weight/bias (C)

  hf/testdata/expected.safetensors
      tokens (B,T) I32 and logits (B,T,V) F32: the model's output for a fixed
      batch (B=2, T=9), float32 on the CPU.

The safetensors files are written by hand here (8-byte little-endian header
length, JSON header, raw little-endian data), so the safetensors package is
not needed either. Run from the repository root:

  /usr/bin/python3 tools/reference/gen_hf_fixture.py

The weights come from torch's seeded RNG; another torch version may draw other
numbers, so if you regenerate, commit all three files together.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

SEED = 4242
V = 99          # vocabulary (gpt2go pads it to 128 when loading)
C = 36          # n_embd
NH = 3          # n_head
HS = C // NH    # head size 12
L = 2           # n_layer
NPOS = 20       # n_positions
B, T = 2, 9     # the batch whose logits are saved
LN_EPS = 1e-5

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "hf", "testdata")


def make_weights(gen):
    """The state dict, in Hugging Face's names and Conv1D (in, out) layout."""
    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    def ln_weight():
        return 1.0 + 0.1 * torch.randn(C, generator=gen)

    def bias(n):
        return 0.02 * torch.randn(n, generator=gen)

    proj_std = 0.02 / math.sqrt(2 * L)
    w = {"wte.weight": normal(V, C), "wpe.weight": normal(NPOS, C)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = ln_weight(), bias(C)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = normal(C, 3 * C), bias(3 * C)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = normal(C, C, std=proj_std), bias(C)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = ln_weight(), bias(C)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = normal(C, 4 * C), bias(4 * C)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = normal(4 * C, C, std=proj_std), bias(C)
    w["ln_f.weight"], w["ln_f.bias"] = ln_weight(), bias(C)
    return w


def conv1d(x, weight, bias):
    """Hugging Face's Conv1D: a linear layer whose weight is stored (in, out)."""
    return torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight).reshape(*x.shape[:-1], weight.shape[1])


def forward(w, idx, n_layer=L, n_head=NH):
    """GPT-2's forward pass over the state dict w (names without the "transformer." prefix,
    Conv1D weights (in, out)): (b, t) ids -> (b, t, V) logits. scripts/hf-check.py imports it."""
    b, t = idx.shape
    c = w["wte.weight"].shape[1]
    hs = c // n_head
    x = w["wte.weight"][idx] + w["wpe.weight"][:t]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(n_layer):
        p = f"h.{i}."
        h = F.layer_norm(x, (c,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], LN_EPS)
        q, k, v = conv1d(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(c, dim=2)
        q, k, v = (z.view(b, t, n_head, hs).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (c,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], LN_EPS)
        h = F.gelu(conv1d(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (c,), w["ln_f.weight"], w["ln_f.bias"], LN_EPS)
    return x @ w["wte.weight"].t()  # the tied lm_head


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, numpy array), written in that order."""
    dtypes = {np.dtype("float32"): "F32", np.dtype("int32"): "I32"}
    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtypes[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    w = make_weights(gen)
    idx = torch.randint(0, V, (B, T), generator=gen)
    with torch.no_grad():
        logits = forward(w, idx)

    tensors = [(name, w[name].numpy()) for name in sorted(w)]
    mask = torch.tril(torch.ones(NPOS, NPOS)).view(1, 1, NPOS, NPOS)
    for i in range(L):
        tensors.append((f"h.{i}.attn.bias", mask.numpy()))
        tensors.append((f"h.{i}.attn.masked_bias", np.array(-1e4, dtype=np.float32)))
    tensors.sort(key=lambda nt: nt[0])

    config = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": V - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": V - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": LN_EPS,
        "model_type": "gpt2",
        "n_ctx": NPOS,
        "n_embd": C,
        "n_head": NH,
        "n_inner": None,
        "n_layer": L,
        "n_positions": NPOS,
        "resid_pdrop": 0.1,
        "scale_attn_weights": True,
        "vocab_size": V,
    }
    model_dir = os.path.join(OUT, "tiny")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors, {"format": "pt"})
    write_safetensors(
        os.path.join(OUT, "expected.safetensors"),
        [("tokens", idx.to(torch.int32).numpy()), ("logits", logits.numpy())],
        {"seed": str(SEED), "torch": torch.__version__, "B": str(B), "T": str(T)},
    )
    print(f"wrote {model_dir}/config.json, model.safetensors and {OUT}/expected.safetensors")


if __name__ == "__main__":
    main()
