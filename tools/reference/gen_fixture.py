#!/usr/bin/python3
"""Generate gpt2go's PyTorch reference fixture for a tiny GPT-2.

This is gpt2go's own reference implementation of GPT-2 (pre-LayerNorm blocks,
fused-qkv causal self-attention, tanh-GELU MLP, LM head tied to the token
embedding), run in float32 on the CPU, deterministically seeded. It writes two
files that the Go tests compare against:

  gpt/testdata/ref_model.bin
      The initial weights as an llm.c-format model file: 256 little-endian
      int32 header words [20240326, 3, maxT, V, L, NH, C, Vp, 0, ...] followed
      by the fp32 parameters, layers stacked, in the order
        wte(Vp,C) wpe(maxT,C) ln1w(L,C) ln1b(L,C) qkvw(L,3C,C) qkvb(L,3C)
        attprojw(L,C,C) attprojb(L,C) ln2w(L,C) ln2b(L,C) fcw(L,4C,C)
        fcb(L,4C) fcprojw(L,C,4C) fcprojb(L,C) lnfw(C) lnfb(C)
      Linear weights are (out, in). qkv output rows are [q(C) | k(C) | v(C)],
      each split into NH heads of HS = C/NH consecutive channels.

  gpt/testdata/ref_expected.safetensors
      tokens (10*B*T+1,) I32         the token stream
      logits (B,T,V) F32             batch-0 logits (first V columns) at init
      loss (1,) F32                  batch-0 mean cross-entropy at init
      grad.<name> F32                d loss / d param at init, one per
                                     parameter above, same (stacked) shapes
      train_losses (10,) F32         loss of step i on batch i, before its update
      train_grad_norms (10,) F32     total grad norm before clipping, per step
      final.wte (Vp,C) F32           wte after the 10 AdamW steps
      __metadata__                   every hyperparameter, as strings

  Batch i is tokens[i*B*T : i*B*T + B*T + 1]; inputs are its first B*T tokens
  reshaped (B,T), targets the same window shifted by one. The loss is the mean
  cross-entropy over the first V (real-vocabulary) logit columns only.

  Each training step: zero grads, forward, backward,
  torch.nn.utils.clip_grad_norm_(all params, MAX_NORM) (clip coefficient
  max_norm/(norm+1e-6), clamped to 1; the tied wte counted once), then
  torch.optim.AdamW(foreach=False) with weight decay only on the 2-D weights
  (wte, wpe, the four Linear weight matrices).

To regenerate (from the repository root):

  apt-get install -y python3-torch
  /usr/bin/python3 tools/reference/gen_fixture.py

The output depends on torch's RNG; the torch version used is recorded in the
metadata. Regenerating with another torch version may change the numbers, in
which case commit both files together.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- hyperparameters (odd sizes on purpose) ---------------------------------
SEED = 1337
V = 101        # real vocabulary
VP = 128       # padded vocabulary (rows V..VP-1 of wte are zero)
C = 60         # n_embd, not a power of two
NH = 3         # heads
HS = C // NH   # head size 20
L = 2          # layers
MAXT = 16      # max sequence length
B = 3
T = 11
STEPS = 10
LR = 3e-3
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
# With max_norm 1.0 every step's norm (1.26..2.50) is clipped; 1.6 clips
# steps 0-2 only, so the fixture covers both clipped and unclipped steps, and
# no norm lies within 3% of the threshold.
MAX_NORM = 1.6
LN_EPS = 1e-5
CLIP_EPS = 1e-6  # torch's clip_grad_norm_: coef = max_norm / (norm + 1e-6)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_PATH = os.path.join(ROOT, "gpt", "testdata", "ref_model.bin")
EXPECTED_PATH = os.path.join(ROOT, "gpt", "testdata", "ref_expected.safetensors")


# ---- model ------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.qkv = nn.Linear(C, 3 * C, bias=True)
        self.attproj = nn.Linear(C, C, bias=True)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)
        self.fc = nn.Linear(C, 4 * C, bias=True)
        self.fcproj = nn.Linear(4 * C, C, bias=True)

    def attention(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(x)                       # (b, t, 3C): [q | k | v]
        q, k, v = qkv.split(C, dim=2)
        # (b, t, C) -> (b, NH, t, HS): head h owns channels h*HS .. h*HS+HS-1
        q = q.view(b, t, NH, HS).transpose(1, 2)
        k = k.view(b, t, NH, HS).transpose(1, 2)
        v = v.view(b, t, NH, HS).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v       # (b, NH, t, HS)
        y = y.transpose(1, 2).reshape(b, t, C)  # heads back to consecutive channels
        return self.attproj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class TinyGPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(VP, C))
        self.wpe = nn.Parameter(torch.empty(MAXT, C))
        self.blocks = nn.ModuleList([Block() for _ in range(L)])
        self.lnf = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte[idx] + self.wpe[:t]
        for blk in self.blocks:
            x = blk(x)
        x = self.lnf(x)
        return x @ self.wte.t()                 # (b, t, VP), tied head

    def loss(self, idx, targets):
        logits = self(idx)
        loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def init_weights(self):
        std = 0.02
        proj_std = 0.02 / math.sqrt(2 * L)
        self.wte.normal_(0.0, std)
        self.wpe.normal_(0.0, std)
        for blk in self.blocks:
            for lin in (blk.qkv, blk.fc):
                lin.weight.normal_(0.0, std)
            for lin in (blk.attproj, blk.fcproj):
                lin.weight.normal_(0.0, proj_std)
        # Perturb away from the trivial LayerNorm/bias init so every
        # parameter (and its gradient) is exercised by the comparison.
        for ln in self.layernorms():
            ln.weight.copy_(1.0 + 0.1 * torch.randn(C))
        for bias in self.biases():
            bias.copy_(0.02 * torch.randn(bias.shape))
        self.wte[V:].zero_()

    def layernorms(self):
        out = []
        for blk in self.blocks:
            out += [blk.ln1, blk.ln2]
        return out + [self.lnf]

    def linears(self):
        out = []
        for blk in self.blocks:
            out += [blk.qkv, blk.attproj, blk.fc, blk.fcproj]
        return out

    def biases(self):
        return [m.bias for m in self.layernorms() + self.linears()]

    def llmc_tensors(self, get):
        """(name, tensor) in llm.c order, per-layer tensors stacked on dim 0.

        get maps a Parameter to the tensor to emit (the value or its grad)."""
        def stack(f):
            return torch.stack([get(f(blk)) for blk in self.blocks])
        return [
            ("wte", get(self.wte)),
            ("wpe", get(self.wpe)),
            ("ln1w", stack(lambda b: b.ln1.weight)),
            ("ln1b", stack(lambda b: b.ln1.bias)),
            ("qkvw", stack(lambda b: b.qkv.weight)),
            ("qkvb", stack(lambda b: b.qkv.bias)),
            ("attprojw", stack(lambda b: b.attproj.weight)),
            ("attprojb", stack(lambda b: b.attproj.bias)),
            ("ln2w", stack(lambda b: b.ln2.weight)),
            ("ln2b", stack(lambda b: b.ln2.bias)),
            ("fcw", stack(lambda b: b.fc.weight)),
            ("fcb", stack(lambda b: b.fc.bias)),
            ("fcprojw", stack(lambda b: b.fcproj.weight)),
            ("fcprojb", stack(lambda b: b.fcproj.bias)),
            ("lnfw", get(self.lnf.weight)),
            ("lnfb", get(self.lnf.bias)),
        ]


EXPECTED_SHAPES = {
    "wte": (VP, C), "wpe": (MAXT, C),
    "ln1w": (L, C), "ln1b": (L, C),
    "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
    "attprojw": (L, C, C), "attprojb": (L, C),
    "ln2w": (L, C), "ln2b": (L, C),
    "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
    "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
    "lnfw": (C,), "lnfb": (C,),
}


# ---- file writers -----------------------------------------------------------
def write_llmc_model(path, model):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    chunks = [header.tobytes()]
    for name, t in model.llmc_tensors(lambda p: p.detach()):
        assert tuple(t.shape) == EXPECTED_SHAPES[name], (name, t.shape)
        chunks.append(t.contiguous().numpy().astype("<f4").tobytes())
    write_atomic(path, b"".join(chunks))


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, np.ndarray) written contiguously in order."""
    dtypes = {np.dtype("float32"): ("F32", "<f4"), np.dtype("int32"): ("I32", "<i4")}
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs = []
    offset = 0
    for name, arr in tensors:
        st_dtype, np_dtype = dtypes[arr.dtype]
        data = np.ascontiguousarray(arr).astype(np_dtype).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    write_atomic(path, struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs))


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# ---- main -------------------------------------------------------------------
def batch(tokens, i):
    w = tokens[i * B * T: i * B * T + B * T + 1]
    return w[:-1].view(B, T), w[1:].view(B, T)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = TinyGPT2()
    model.init_weights()
    tokens = torch.randint(0, V, (STEPS * B * T + 1,), dtype=torch.int64)

    write_llmc_model(MODEL_PATH, model)

    # Forward/backward of batch 0 at the initial weights.
    x, y = batch(tokens, 0)
    logits, loss = model.loss(x, y)
    loss.backward()
    init_logits = logits[..., :V].detach().clone()
    init_loss = loss.detach().clone()
    grads = [(n, g.clone()) for n, g in model.llmc_tensors(lambda p: p.grad)]
    assert torch.all(model.wte.grad[V:] == 0)

    # Training: 10 steps of clip + AdamW.
    decay = [model.wte, model.wpe] + [m.weight for m in model.linears()]
    decay_ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in decay_ids]
    assert len(decay) + len(no_decay) == len(list(model.parameters()))
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses, norms = [], []
    for i in range(STEPS):
        opt.zero_grad(set_to_none=True)
        x, y = batch(tokens, i)
        _, loss = model.loss(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    final_wte = model.wte.detach().clone()
    assert torch.all(final_wte[V:] == 0)

    tensors = [("tokens", tokens.numpy().astype(np.int32)),
               ("logits", init_logits.numpy()),
               ("loss", init_loss.reshape(1).numpy())]
    tensors += [("grad." + n, g.numpy()) for n, g in grads]
    tensors += [("train_losses", np.array(losses, dtype=np.float32)),
                ("train_grad_norms", np.array(norms, dtype=np.float32)),
                ("final.wte", final_wte.numpy())]
    metadata = {
        "V": V, "Vp": VP, "C": C, "NH": NH, "L": L, "maxT": MAXT,
        "B": B, "T": T, "steps": STEPS, "lr": LR,
        "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "max_norm": MAX_NORM,
        "clip_eps": CLIP_EPS, "ln_eps": LN_EPS, "seed": SEED,
        "torch_version": torch.__version__,
        "generator": "tools/reference/gen_fixture.py",
    }
    write_safetensors(EXPECTED_PATH, tensors, metadata)

    print(f"torch {torch.__version__}, seed {SEED}")
    print(f"V={V} Vp={VP} C={C} NH={NH} L={L} maxT={MAXT} B={B} T={T}")
    print(f"init loss {init_loss.item():.6f} (ln V = {math.log(V):.6f})")
    clipped = sum(n > MAX_NORM for n in norms)
    print(f"max_norm {MAX_NORM}: {clipped}/{STEPS} steps clipped")
    for i, (l, n) in enumerate(zip(losses, norms)):
        print(f"step {i}: loss {l:.6f} grad_norm {n:.6f}{' (clipped)' if n > MAX_NORM else ''}")
    for p in (MODEL_PATH, EXPECTED_PATH):
        print(f"wrote {os.path.relpath(p, ROOT)} ({os.path.getsize(p)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
