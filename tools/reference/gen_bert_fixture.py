#!/usr/bin/python3
"""Generate gpt2go's PyTorch reference fixtures for a tiny BERT (issue 15).

This is gpt2go's own reference implementation of a BERT encoder trained by
masked-language modelling, in float32 on the CPU, deterministically seeded:
token + position (+ token-type) embeddings and an embedding LayerNorm; blocks
of fused-qkv bidirectional self-attention with padded keys masked out and a
4C GELU MLP, post-LN as in the original BERT or pre-LN (GPT-2's order, with a
final LayerNorm); the MLM head (dense C->C, GELU, LayerNorm, then the token
embedding matrix, tied, plus an output bias). No dropout.

It writes two fixtures that bert/model_test.go compares against:

  bert/testdata/ref_postln.safetensors   BERT's layout: post-LN, exact-erf
                                         GELU, 2 token types
  bert/testdata/ref_preln.safetensors    pre-LN, tanh GELU, no token types

Each holds
  inputs, targets, types (STEPS,B,T) I32  batch i's masked inputs, targets
                                          (-1 = not in the loss) and token
                                          types (types: only with token types)
  lengths (STEPS,B) I32                   each sequence's length; positions
                                          past it are [PAD] with target -1
  init.<name> F32                         the initial parameters, in the Go
                                          model's ParamSpecs order and names
                                          (layers stacked on dim 0, Linear
                                          weights (out, in), qkv rows q|k|v)
  logits (B,T,V) F32                      batch 0's logits (first V columns)
                                          at every position, at init
  loss (1,) F32                           batch 0's mean MLM loss at init
  grad.<name> F32                         d loss / d param at init
  train_losses, train_grad_norms (STEPS,) loss before each update, and the
                                          total grad norm before clipping
  final.<name>, exp_avg.<name>,           every parameter and both AdamW
  exp_avg_sq.<name> F32                   moments after the STEPS steps
  __metadata__                            every hyperparameter, as strings

The MLM loss is the mean cross-entropy over the positions whose target is not
-1, over the first V (real-vocabulary) logit columns. Each training step: zero
grads, forward and backward of batch i, clip_grad_norm_(max_norm), AdamW
(foreach=False) with weight decay on the 2-D weights only (the embeddings and
the Linear weights).

Regenerate, or check that the committed files are what this script writes
(from the repository root):

  /usr/bin/python3 tools/reference/gen_bert_fixture.py
  /usr/bin/python3 tools/reference/gen_bert_fixture.py --check

The numerics are pinned as for gen_fixture.py (whose helpers this script
imports): one thread, ATen's AVX2 kernels, Debian's reference BLAS; see the
"Reproducibility" notes there.
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixture as ref  # noqa: E402  (pins the numerics: may re-execute this script)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# ---- hyperparameters (odd sizes on purpose) ---------------------------------
SEED = 4242
V = 67         # real vocabulary; ids 0..3 play [PAD] [CLS] [SEP] [MASK]
VP = 80        # padded vocabulary (rows V..VP-1 of wte and outb stay zero)
C = 24         # channels, not a power of two
NH = 3         # heads of HS = 8
HS = C // NH
L = 2
MAXT = 16
B = 3
T = 13
STEPS = 10
LR = 3e-3
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
LN_EPS = 1e-5
PAD, CLS, SEP, MASK = 0, 1, 2, 3

ROOT = ref.ROOT
VARIANTS = {
    # name: (pre_ln, tanh_gelu, type_vocab, max_norm). max_norm is chosen so that some steps
    # are clipped and others not, no norm within 3% of it (see the printed norms).
    "postln": (False, False, 2, 2.1),
    "preln": (True, True, 0, 2.43),
}


# ---- model ------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, pre_ln, gelu):
        super().__init__()
        self.pre_ln, self.gelu = pre_ln, gelu
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)

    def attention(self, x, lengths):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(b, t, NH, HS).transpose(1, 2)  # (b, NH, t, HS)
        k = k.view(b, t, NH, HS).transpose(1, 2)
        v = v.view(b, t, NH, HS).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        # Bidirectional: every query sees every key of its sequence; keys past its length are
        # padding. Padded queries see the valid keys too (finite outputs, not in the loss).
        valid = torch.arange(t)[None, :] < lengths[:, None]  # (b, t) keys
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.attproj(y.transpose(1, 2).reshape(b, t, C))

    def mlp(self, x):
        return self.fcproj(self.gelu(self.fc(x)))

    def forward(self, x, lengths):
        if self.pre_ln:
            x = x + self.attention(self.ln1(x), lengths)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attention(x, lengths))
        return self.ln2(x + self.mlp(x))


class TinyBERT(nn.Module):
    def __init__(self, pre_ln, tanh_gelu, type_vocab):
        super().__init__()
        self.pre_ln, self.type_vocab = pre_ln, type_vocab
        self.gelu = (lambda x: F.gelu(x, approximate="tanh")) if tanh_gelu else F.gelu
        self.wte = nn.Parameter(torch.empty(VP, C))
        self.wpe = nn.Parameter(torch.empty(MAXT, C))
        self.wtype = nn.Parameter(torch.empty(type_vocab, C)) if type_vocab else None
        self.embedln = nn.LayerNorm(C, eps=LN_EPS)
        self.blocks = nn.ModuleList([Block(pre_ln, self.gelu) for _ in range(L)])
        self.lnf = nn.LayerNorm(C, eps=LN_EPS) if pre_ln else None
        self.head = nn.Linear(C, C)
        self.headln = nn.LayerNorm(C, eps=LN_EPS)
        self.outb = nn.Parameter(torch.zeros(VP))

    def encode(self, idx, types, lengths):
        """The encoder's output (b, t, C): embeddings, their LayerNorm, the blocks (and lnf)."""
        t = idx.shape[1]
        x = self.wte[idx] + self.wpe[:t]
        if self.wtype is not None:
            x = x + self.wtype[types]
        x = self.embedln(x)
        for blk in self.blocks:
            x = blk(x, lengths)
        if self.lnf is not None:
            x = self.lnf(x)
        return x

    def forward(self, idx, types, lengths):
        x = self.encode(idx, types, lengths)
        h = self.headln(self.gelu(self.head(x)))
        return h @ self.wte.t() + self.outb  # (b, t, VP)

    def loss(self, idx, targets, types, lengths):
        logits = self(idx, types, lengths)
        loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def layernorms(self):
        out = [self.embedln] + [ln for blk in self.blocks for ln in (blk.ln1, blk.ln2)]
        return out + ([self.lnf] if self.lnf is not None else []) + [self.headln]

    def linears(self):
        return [lin for blk in self.blocks for lin in (blk.qkv, blk.attproj, blk.fc, blk.fcproj)] + [self.head]

    @torch.no_grad()
    def init_weights(self):
        for p in [self.wte, self.wpe] + ([self.wtype] if self.wtype is not None else []):
            p.normal_(0.0, 0.02)
        for lin in self.linears():
            lin.weight.normal_(0.0, 0.02)
        # Perturb away from BERT's LayerNorm 1/0 and zero biases so that every parameter, and
        # its gradient, takes part in the comparison.
        for ln in self.layernorms():
            ln.weight.copy_(1.0 + 0.1 * torch.randn(C))
            ln.bias.copy_(0.02 * torch.randn(C))
        for lin in self.linears():
            lin.bias.copy_(0.02 * torch.randn(lin.bias.shape))
        self.outb.copy_(0.02 * torch.randn(VP))
        self.wte[V:].zero_()
        self.outb[V:].zero_()

    def gpt2go_params(self):
        """(name, parameter) in bert.Config.ParamSpecs order; a per-layer tensor's entry is the
        list of its L parameters, which gpt2go stores stacked (L, ...)."""
        def layers(f):
            return [f(blk) for blk in self.blocks]
        out = [("wte", self.wte), ("wpe", self.wpe)]
        if self.wtype is not None:
            out.append(("wtype", self.wtype))
        out += [("embedlnw", self.embedln.weight), ("embedlnb", self.embedln.bias)]
        for name, f in [("qkvw", lambda b: b.qkv.weight), ("qkvb", lambda b: b.qkv.bias),
                        ("attprojw", lambda b: b.attproj.weight), ("attprojb", lambda b: b.attproj.bias),
                        ("ln1w", lambda b: b.ln1.weight), ("ln1b", lambda b: b.ln1.bias),
                        ("fcw", lambda b: b.fc.weight), ("fcb", lambda b: b.fc.bias),
                        ("fcprojw", lambda b: b.fcproj.weight), ("fcprojb", lambda b: b.fcproj.bias),
                        ("ln2w", lambda b: b.ln2.weight), ("ln2b", lambda b: b.ln2.bias)]:
            out.append((name, layers(f)))
        if self.lnf is not None:
            out += [("lnfw", self.lnf.weight), ("lnfb", self.lnf.bias)]
        return out + [("headw", self.head.weight), ("headb", self.head.bias),
                      ("headlnw", self.headln.weight), ("headlnb", self.headln.bias), ("outb", self.outb)]

    def named_tensors(self, get):
        """(name, tensor) in bert.Config.ParamSpecs order, per-layer tensors stacked."""
        return [(name, torch.stack([get(q) for q in p]) if isinstance(p, list) else get(p))
                for name, p in self.gpt2go_params()]


# ---- data -------------------------------------------------------------------
def make_batches(type_vocab):
    """STEPS batches of [CLS] tokens [SEP] [PAD]..., some positions masked BERT's way."""
    inputs = torch.full((STEPS, B, T), PAD, dtype=torch.int64)
    targets = torch.full((STEPS, B, T), -1, dtype=torch.int64)
    types = torch.zeros((STEPS, B, T), dtype=torch.int64)
    lengths = torch.randint(T - 5, T + 1, (STEPS, B))
    lengths[:, 0] = T  # one full sequence per batch
    for i in range(STEPS):
        for b in range(B):
            n = int(lengths[i, b])
            seq = torch.randint(4, V, (n,))
            seq[0], seq[n - 1] = CLS, SEP
            chosen = torch.nonzero(torch.rand(n - 2) < 0.3).flatten() + 1
            if len(chosen) == 0:
                chosen = torch.tensor([1 + int(torch.randint(0, n - 2, ()))])
            inp = seq.clone()
            for t in chosen.tolist():
                targets[i, b, t] = seq[t]
                r = float(torch.rand(()))
                inp[t] = MASK if r < 0.8 else (int(torch.randint(4, V, ())) if r < 0.9 else seq[t])
            inputs[i, b, :n] = inp
            if type_vocab:
                split = int(torch.randint(1, n, ()))
                types[i, b, split:n] = 1
    return inputs, targets, types, lengths


# ---- main -------------------------------------------------------------------
def generate(name):
    pre_ln, tanh_gelu, type_vocab, max_norm = VARIANTS[name]
    torch.manual_seed(SEED)
    model = TinyBERT(pre_ln, tanh_gelu, type_vocab)
    model.init_weights()
    inputs, targets, types, lengths = make_batches(type_vocab)
    init = [(n, t.clone()) for n, t in model.named_tensors(lambda p: p.detach())]

    logits, loss = model.loss(inputs[0], targets[0], types[0], lengths[0])
    loss.backward()
    init_logits = logits[..., :V].detach().clone()
    init_loss = loss.detach().clone()
    grads = [(n, g.clone()) for n, g in model.named_tensors(lambda p: p.grad)]
    assert torch.all(model.wte.grad[V:] == 0) and torch.all(model.outb.grad[V:] == 0)

    decay = [model.wte, model.wpe] + ([model.wtype] if type_vocab else []) + [m.weight for m in model.linears()]
    decay_ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in decay_ids]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses, norms = [], []
    for i in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = model.loss(inputs[i], targets[i], types[i], lengths[i])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    assert torch.all(model.wte[V:] == 0) and torch.all(model.outb[V:] == 0)

    i32 = lambda t: t.numpy().astype(np.int32)  # noqa: E731
    tensors = [("inputs", i32(inputs)), ("targets", i32(targets)), ("lengths", i32(lengths))]
    if type_vocab:
        tensors.append(("types", i32(types)))
    tensors += [("init." + n, t.numpy()) for n, t in init]
    tensors += [("logits", init_logits.numpy()), ("loss", init_loss.reshape(1).numpy())]
    tensors += [("grad." + n, g.numpy()) for n, g in grads]
    tensors += [("train_losses", np.array(losses, dtype=np.float32)),
                ("train_grad_norms", np.array(norms, dtype=np.float32))]
    for prefix, get in (("final.", lambda p: p.detach()), ("exp_avg.", lambda p: opt.state[p]["exp_avg"]),
                        ("exp_avg_sq.", lambda p: opt.state[p]["exp_avg_sq"])):
        tensors += [(prefix + n, t.clone().numpy()) for n, t in model.named_tensors(get)]
    metadata = {
        "V": V, "Vp": VP, "C": C, "NH": NH, "L": L, "maxT": MAXT, "B": B, "T": T,
        "type_vocab_size": type_vocab, "pre_ln": int(pre_ln), "gelu_tanh": int(tanh_gelu),
        "steps": STEPS, "lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "max_norm": max_norm, "ln_eps": LN_EPS, "seed": SEED,
        "torch_version": torch.__version__, "aten_cpu_capability": ref.CPU_CAPABILITY,
        "blas": "reference (Debian libblas3)", "generator": "tools/reference/gen_bert_fixture.py",
    }
    report = [f"{name}: init loss {init_loss.item():.6f} (ln V = {math.log(V):.6f}), max_norm {max_norm}"]
    for i, (l, n) in enumerate(zip(losses, norms)):
        report.append(f"  step {i}: loss {l:.6f} grad_norm {n:.6f}{' (clipped)' if n > max_norm else ''}")
    return ref.safetensors_bytes(tensors, metadata), report


def main():
    check_only = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check_only:
        sys.exit("usage: gen_bert_fixture.py [--check]")
    if os.environ.get("GPT2GO_FIXTURE_PINNED") == "1":
        blas = ref.loaded_blas()
        if any(os.path.dirname(p) not in ref.REFERENCE_BLAS_DIRS for p in blas):
            sys.exit(f"torch loaded {blas}, not the reference BLAS in {ref.REFERENCE_BLAS_DIRS[0]}")
    torch.set_num_threads(1)
    same = True
    for name in VARIANTS:
        data, report = generate(name)
        path = os.path.join(ROOT, "bert", "testdata", f"ref_{name}.safetensors")
        rel = os.path.relpath(path, ROOT)
        if check_only:
            with open(path, "rb") as f:
                old = f.read()
            if old == data:
                print(f"{rel}: identical ({len(data)} bytes)")
                continue
            same = False
            print(f"{rel}: DIFFERS from what this script generates")
            (a, _), (b, _) = ref.read_safetensors(old), ref.read_safetensors(data)
            for n in sorted(set(a) | set(b)):
                if n not in a or n not in b or a[n].shape != b[n].shape:
                    print(f"  {n}: missing or reshaped")
                elif not np.array_equal(a[n], b[n]):
                    d = np.abs(a[n].astype(np.float64) - b[n].astype(np.float64)).max()
                    print(f"  {n}: max abs diff {d:.3g}")
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ref.write_atomic(path, data)
        print("\n".join(report))
        print(f"wrote {rel} ({len(data)} bytes)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
