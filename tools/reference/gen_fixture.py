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
      final.<name> F32               every parameter after the 10 AdamW steps
      exp_avg.<name> F32             AdamW's first moment after the 10 steps
      exp_avg_sq.<name> F32          AdamW's second moment after the 10 steps
      __metadata__                   every hyperparameter, as strings

  final.*, exp_avg.* and exp_avg_sq.* have one tensor per parameter, with the
  same names and (stacked) shapes as grad.*.

  Batch i is tokens[i*B*T : i*B*T + B*T + 1]; inputs are its first B*T tokens
  reshaped (B,T), targets the same window shifted by one. The loss is the mean
  cross-entropy over the first V (real-vocabulary) logit columns only.

  Each training step: zero grads, forward, backward,
  torch.nn.utils.clip_grad_norm_(all params, MAX_NORM) (clip coefficient
  max_norm/(norm+1e-6), clamped to 1; the tied wte counted once), then
  torch.optim.AdamW(foreach=False) with weight decay only on the 2-D weights
  (wte, wpe, the four Linear weight matrices).

To regenerate, or to check that the committed files are what this script
writes (from the repository root):

  apt-get install -y python3-torch
  /usr/bin/python3 tools/reference/gen_fixture.py
  /usr/bin/python3 tools/reference/gen_fixture.py --check

Reproducibility. Two things below torch change the low bits of the results,
so the script pins both (re-executing itself once with the environment set):
  - ATen's CPU kernels are compiled per instruction set and picked at run
    time. The AVX2 and scalar ("default") versions of normal_ differ in the
    last bit of a third of the initial weights, and the softmax, LayerNorm and
    reduction kernels differ up to ~7e-6 after 10 steps. The script sets
    ATEN_CPU_CAPABILITY=avx2 (torch 1.13's own choice on any AVX2+FMA CPU).
  - Matrix products go to whatever libblas.so.3 the system's alternatives
    point at. OpenBLAS instead of the reference BLAS leaves the weights
    identical but moves the expectations by up to 2.4e-6 (1.75e-6 with its
    Haswell kernels). The script puts Debian's reference BLAS and LAPACK
    (libblas3, liblapack3) first on LD_LIBRARY_PATH and checks that torch
    loaded them.
With Debian 12's python3-torch (1.13) on an x86-64 CPU with AVX2 and FMA, both
files are then byte-identical from run to run and machine to machine; --check
proves it. Another torch version may change the random numbers: if you
regenerate with one, commit both files together.
"""

import json
import math
import os
import platform
import struct
import sys
import sysconfig


# ---- pinned numerics (see "Reproducibility" above) -----------------------------
CPU_CAPABILITY = "avx2"
MULTIARCH = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
REFERENCE_BLAS_DIRS = [f"/usr/lib/{MULTIARCH}/blas", f"/usr/lib/{MULTIARCH}/lapack"]


def cpu_has_avx2_fma():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def pin_numerics():
    """Re-execute once with the reference BLAS first and ATen's AVX2 kernels.

    The dynamic loader reads LD_LIBRARY_PATH only at process start, hence the
    exec. On a machine that cannot pin them, warn and go on: the results are
    then correct but differ from the committed bytes in the low bits."""
    if os.environ.get("GPT2GO_FIXTURE_PINNED") == "1":
        return
    if platform.machine() != "x86_64" or not cpu_has_avx2_fma():
        print("warning: not an x86-64 CPU with AVX2 and FMA; the output will differ "
              "from the committed fixture in the low bits", file=sys.stderr)
        return
    missing = [d for d in REFERENCE_BLAS_DIRS if not os.path.isdir(d)]
    if missing:
        sys.exit(f"reference BLAS/LAPACK not found ({', '.join(missing)}): "
                 "apt-get install -y libblas3 liblapack3")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=CPU_CAPABILITY, OMP_NUM_THREADS="1",
               GPT2GO_FIXTURE_PINNED="1")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        REFERENCE_BLAS_DIRS + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


pin_numerics()

import numpy as np  # noqa: E402  (after the exec above)
import torch  # noqa: E402
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
def llmc_model_bytes(model):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    chunks = [header.tobytes()]
    for name, t in model.llmc_tensors(lambda p: p.detach()):
        assert tuple(t.shape) == EXPECTED_SHAPES[name], (name, t.shape)
        chunks.append(t.contiguous().numpy().astype("<f4").tobytes())
    return b"".join(chunks)


SAFETENSORS_DTYPES = {"F32": "<f4", "I32": "<i4"}


def safetensors_bytes(tensors, metadata):
    """tensors: list of (name, np.ndarray) written contiguously in order."""
    st_dtypes = {np.dtype("float32"): "F32", np.dtype("int32"): "I32"}
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs = []
    offset = 0
    for name, arr in tensors:
        st_dtype = st_dtypes[arr.dtype]
        data = np.ascontiguousarray(arr).astype(SAFETENSORS_DTYPES[st_dtype]).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def read_safetensors(data):
    """{name: np.ndarray} and the metadata of a safetensors file's bytes."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, h in header.items():
        start, end = h["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=SAFETENSORS_DTYPES[h["dtype"]]).reshape(h["shape"])
    return tensors, metadata


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def check(path, data):
    """Compare freshly generated bytes with the committed file; True if identical."""
    rel = os.path.relpath(path, ROOT)
    with open(path, "rb") as f:
        old = f.read()
    if old == data:
        print(f"{rel}: identical ({len(data)} bytes)")
        return True
    print(f"{rel}: DIFFERS from what this script generates")
    if path == EXPECTED_PATH:
        (a, ma), (b, mb) = read_safetensors(old), read_safetensors(data)
        for k in sorted(set(ma) | set(mb)):
            if ma.get(k) != mb.get(k):
                print(f"  metadata {k}: committed {ma.get(k)!r}, generated {mb.get(k)!r}")
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                print(f"  {name}: only in the {'generated' if name in b else 'committed'} file")
            elif a[name].shape != b[name].shape:
                print(f"  {name}: shape {a[name].shape} committed, {b[name].shape} generated")
            elif not np.array_equal(a[name], b[name]):
                d = np.abs(a[name].astype(np.float64) - b[name].astype(np.float64)).max()
                print(f"  {name}: max abs diff {d:.3g}")
    return False


def loaded_blas():
    """Paths of the BLAS libraries mapped into this process (after a matmul)."""
    torch.ones(8, 8) @ torch.ones(8, 8)
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    return sorted(os.path.realpath(p) for p in paths)


# ---- main -------------------------------------------------------------------
def batch(tokens, i):
    w = tokens[i * B * T: i * B * T + B * T + 1]
    return w[:-1].view(B, T), w[1:].view(B, T)


def main():
    check_only = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check_only:
        sys.exit("usage: gen_fixture.py [--check]")
    if os.environ.get("GPT2GO_FIXTURE_PINNED") == "1":
        blas = loaded_blas()
        if any(os.path.dirname(p) not in REFERENCE_BLAS_DIRS for p in blas):
            sys.exit(f"torch loaded {blas}, not the reference BLAS in {REFERENCE_BLAS_DIRS[0]}")
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = TinyGPT2()
    model.init_weights()
    tokens = torch.randint(0, V, (STEPS * B * T + 1,), dtype=torch.int64)

    model_bytes = llmc_model_bytes(model)

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
    assert torch.all(model.wte[V:] == 0)
    final = model.llmc_tensors(lambda p: p.detach())
    exp_avg = model.llmc_tensors(lambda p: opt.state[p]["exp_avg"])
    exp_avg_sq = model.llmc_tensors(lambda p: opt.state[p]["exp_avg_sq"])

    tensors = [("tokens", tokens.numpy().astype(np.int32)),
               ("logits", init_logits.numpy()),
               ("loss", init_loss.reshape(1).numpy())]
    tensors += [("grad." + n, g.numpy()) for n, g in grads]
    tensors += [("train_losses", np.array(losses, dtype=np.float32)),
                ("train_grad_norms", np.array(norms, dtype=np.float32))]
    for prefix, named in (("final.", final), ("exp_avg.", exp_avg), ("exp_avg_sq.", exp_avg_sq)):
        tensors += [(prefix + n, x.clone().numpy()) for n, x in named]
    metadata = {
        "V": V, "Vp": VP, "C": C, "NH": NH, "L": L, "maxT": MAXT,
        "B": B, "T": T, "steps": STEPS, "lr": LR,
        "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "max_norm": MAX_NORM,
        "clip_eps": CLIP_EPS, "ln_eps": LN_EPS, "seed": SEED,
        "torch_version": torch.__version__,
        "aten_cpu_capability": CPU_CAPABILITY, "blas": "reference (Debian libblas3)",
        "generator": "tools/reference/gen_fixture.py",
    }
    outputs = {MODEL_PATH: model_bytes, EXPECTED_PATH: safetensors_bytes(tensors, metadata)}
    if check_only:
        same = [check(p, data) for p, data in outputs.items()]
        return 0 if all(same) else 1
    for p, data in outputs.items():
        write_atomic(p, data)

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
