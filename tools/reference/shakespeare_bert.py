#!/usr/bin/python3
"""PyTorch reference run of BERT masked-language-model training on Tiny Shakespeare.

What it is
----------
A side-by-side check for `gpt2go train --arch bert`: it trains the same BERT
encoder, on the same tokens, with the same masking rule, optimizer, schedule
and evaluation, in float32 on the CPU, so that the two runs' final MLM
validation loss and masked-token accuracy can be compared (and their ms/step,
with the caveat below).

With --init-from RUN/checkpoints/step_00000000.safetensors (gpt2go's initial
weights) and the default --masks go (gpt2go's masks, draw for draw: a Python
port of bert.Masker and Go's PCG, checked against Go by bert/mask_test.go),
the two runs start from the same weights and see the same masked batches, so
their losses agree to float32 rounding at first (measured: step 1 to 4
decimals, and the same masked-token counts) and drift apart only as rounding
differences grow. Without them (own init from torch's generator, or --masks
torch) the runs agree statistically, not step by step.

How it mirrors gpt2go
---------------------
Model. The model classes are those of tools/reference/gen_bert_fixture.py (the
PyTorch BERT that bert/model_test.go checks the Go model against to ~1e-6),
imported and sized through that module's globals: token + learned position +
token-type embeddings (2 types, every token of type 0) and an embedding
LayerNorm; fused-qkv bidirectional attention and a 4C exact-erf GELU MLP,
post-LN (BERT's order, the default) or pre-LN with a final LayerNorm (--pre-ln,
as gpt2go's PreLN); the MLM head (dense C->C, GELU, LayerNorm, the tied token
embedding, an output bias). No dropout. LayerNorm eps 1e-5.
As bert.Model does, the head runs only on the masked positions, and the logits
cover the real vocabulary (the V = meta.json vocab_size ids, specials
included); rows V..Vp-1 of wte and outb (--pad-vocab, default 0 = no padding,
gpt2go's default) stay zero and never reach the loss.

Init (bert.Model.Init): wte (real rows), wpe, wtype and every Linear weight
N(0, 0.02); biases and outb 0; LayerNorm weights 1, biases 0; padded wte rows 0.
Drawn from torch's generator, or --init-from a gpt2go checkpoint's weights.

Data (data.Dataset, data.Loader). --data is a directory made by
  gpt2go prepare --tokenizer char --bert-specials --input tinyshakespeare.txt --out DIR
with train shards *train*.bin and val shards *val*.bin (llm.c format: 256
int32 header [20240520, 1, tokens, 0...], then uint16 tokens) and meta.json
(vocab_size, specials: the [CLS] [SEP] [MASK] ids). With sequence length T a
row is [CLS] + T-2 stream tokens + [SEP], so the loader's length is W = T-2:
  - training reads the train shards in order (gpt2go's sequential mode, llm.c's
    loader): batch k is the next B*W+1 tokens, row b its tokens [b*W, b*W+W);
    the position advances by B*W, and when fewer than B*W+1 tokens remain in
    the shard it moves to the next usable one (shards shorter than B*W+1 are
    skipped), wrapping around to the first;
  - validation is the spread-mode loader (data.NewEvalLoader): R = eval_batches
    * B rows of W tokens; shard s has max(0, n_s - W) windows, and row r starts
    at window floor((2r+1) * windows / (2R)) counted over all val shards: the
    middle of the row's equal share. Every evaluation sees the same rows.

Masking (bert.Masker). Per row, of the positions whose token is not special
([PAD] [UNK] [CLS] [SEP] [MASK]), n = max(1, round(0.15 * count)) are chosen
uniformly without replacement (19 of 126 at T = 128); each chosen input becomes
[MASK] with probability 0.8, a uniformly drawn non-special token with 0.1, and
stays itself with 0.1; the target is the original token there and ignored
elsewhere. The loss is the mean cross-entropy over the batch's chosen
positions. With --masks go the draws are gpt2go's: training batch s (0-based)
is masked by a PCG seeded from (--seed, s, 0), validation batch i by one seeded
from (--seed ^ 0x76616c5f6d61736b, 0, i). With --masks torch, training masks
come from a torch generator seeded with --seed and the validation masks from
one with a fixed seed (--eval-seed). Either way every evaluation scores the
same masked positions. Val loss
= total cross-entropy over all masked positions of the eval batches / their
number; val accuracy = positions whose argmax logit (over the real vocabulary,
first index on ties) is the target / their number. The batch accuracy in the
training log is the same count on the training batch (before its update).

Optimizer (train.Config, gpt2go's defaults for --grad-accum 1). Each step:
zero grads, forward and backward of one batch, clip_grad_norm_(all params,
--grad-clip) (0 = off), torch.optim.AdamW with weight decay only on the 2-D
weights (bert.Config.ParamSpecs' Decay: wte, wpe, wtype, qkvw, attprojw, fcw,
fcprojw, headw). The learning rate of step s (0-based) is train.Config.LRAt:
lr * (s+1)/warmup during warmup, then cosine (or --lr-schedule linear /
constant) from lr down to min_lr at ratio (s - warmup)/(steps - warmup).

Speed caveat. Debian's python3-torch calls whatever libblas.so.3 the system
alternatives select; with only the reference (netlib) BLAS installed, matrix
products run single-threaded at a few GFLOP/s whatever --threads says, so
bert-mini at B=32, T=128 takes tens of seconds a step. With OpenBLAS as the
libblas.so.3 alternative the same script is much faster. ms_per_step is
reported as measured (median over steps 2..N of the whole step: batch read,
masking, forward, backward, clip, update).

How to run it (from the repository root)
----------------------------------------
  go build -o /tmp/g2 ./cmd/gpt2go
  /tmp/g2 prepare --tokenizer char --bert-specials \\
      --input ../shared/data/tinyshakespeare.txt --out /tmp/shakespeare_bert
  /usr/bin/python3 tools/reference/shakespeare_bert.py --data /tmp/shakespeare_bert \\
      --n-layer 4 --n-head 4 --n-embd 256 --seq-len 128 --batch-size 32 \\
      --steps 600 --lr 1e-3 --min-lr 1e-4 --warmup 60 --weight-decay 0.01 \\
      --beta1 0.9 --beta2 0.999 --eps 1e-6 --grad-clip 1.0 \\
      --eval-every 100 --eval-batches 20 --seed 1337 --threads 2 --json ref.json

and the gpt2go run to compare with uses the same values (--shuffle=false for
the sequential train loader). Use /usr/bin/python3 (Debian's numpy and torch
1.13), not another python3 on PATH.
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# gen_fixture (imported by gen_bert_fixture) re-executes the process with the reference BLAS and
# one OpenMP thread to pin its fixtures' low bits. This script wants the model classes only, with
# its own thread count, so it imports them as if already pinned and restores the variable.
_pinned = os.environ.get("GPT2GO_FIXTURE_PINNED")
os.environ["GPT2GO_FIXTURE_PINNED"] = "1"
import gen_bert_fixture as fx  # noqa: E402
if _pinned is None:
    del os.environ["GPT2GO_FIXTURE_PINNED"]
else:
    os.environ["GPT2GO_FIXTURE_PINNED"] = _pinned

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SHARD_MAGIC, SHARD_VERSION, HEADER_INTS = 20240520, 1, 256
MASK_RATE = 0.15
LN_EPS = 1e-5


# ---- data -------------------------------------------------------------------
def read_shard(path):
    """The uint16 tokens of an llm.c-format shard, as an int64 numpy array."""
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if len(header) != HEADER_INTS or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        sys.exit(f"{path}: not an llm.c shard (magic {SHARD_MAGIC}, version {SHARD_VERSION}); "
                 "prepare the data with gpt2go prepare")
    n = int(header[2])
    tokens = np.fromfile(path, dtype="<u2", count=n, offset=HEADER_INTS * 4)
    if len(tokens) != n:
        sys.exit(f"{path}: header says {n} tokens, file holds {len(tokens)}")
    return tokens.astype(np.int64)


def open_dataset(path):
    """(train shards, val shards, meta) of a gpt2go-prepared directory (data.Open's rule)."""
    if not os.path.isdir(path):
        sys.exit(f"--data {path}: not a directory; make one with gpt2go prepare --bert-specials")
    names = sorted(n for n in os.listdir(path) if n.endswith(".bin") and not n.startswith("."))
    train = [os.path.join(path, n) for n in names if "train" in n]
    val = [os.path.join(path, n) for n in names if "train" not in n and "val" in n]
    if not train or not val:
        sys.exit(f"--data {path}: needs *train*.bin and *val*.bin shards")
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    sp = meta.get("specials") or {}
    if any(sp.get(k, -1) < 0 for k in ("cls", "sep", "mask")):
        sys.exit(f"{path}/meta.json has no [CLS]/[SEP]/[MASK] ids; prepare with --bert-specials")
    return [read_shard(p) for p in train], [read_shard(p) for p in val], meta


class SequentialLoader:
    """data.Loader's sequential mode for rows of W tokens: B rows per batch."""

    def __init__(self, shards, B, W):
        self.shards, self.B, self.W = shards, B, W
        self.need = B * W + 1
        self.usable = [i for i, s in enumerate(shards) if len(s) >= self.need]
        if not self.usable:
            sys.exit(f"train data too short: {max(len(s) for s in shards)} tokens < B*(T-2)+1 = {self.need}")
        self.shard, self.pos = self.usable[0], 0
        self.wraps = 0

    def next(self):
        n = self.B * self.W
        if self.pos + n + 1 > len(self.shards[self.shard]):
            later = [i for i in self.usable if i > self.shard]
            if not later:
                self.wraps += 1
            self.shard, self.pos = (later or self.usable)[0], 0
        rows = self.shards[self.shard][self.pos:self.pos + n].reshape(self.B, self.W)
        self.pos += n
        return torch.from_numpy(rows.copy())


def spread_rows(shards, B, W, batches):
    """data.NewEvalLoader's rows: batches*B windows of W tokens spaced evenly over the shards."""
    ends, total = [], 0
    for s in shards:
        total += max(0, len(s) - W)
        ends.append(total)
    if total == 0:
        sys.exit(f"val data too short for rows of T-2 = {W} tokens")
    R = batches * B
    rows = []
    for r in range(R):
        window = (2 * r + 1) * total // (2 * R)  # exact integers, as the Go side's 128-bit product
        i = next(k for k, e in enumerate(ends) if e > window)
        off = window - (ends[i - 1] if i > 0 else 0)
        rows.append(shards[i][off:off + W])
    return torch.from_numpy(np.stack(rows)).reshape(batches, B, W)


class Masker:
    """bert.Masker's rule with a torch generator (--masks torch): the same distribution as
    gpt2go's masks, not the same draws. step and micro are ignored: the generator runs on."""

    def __init__(self, meta, seed):
        sp = meta["specials"]
        self.V = int(meta["vocab_size"])
        self.cls, self.sep, self.mask = sp["cls"], sp["sep"], sp["mask"]
        special = torch.zeros(self.V, dtype=torch.bool)
        for k in ("pad", "unk", "cls", "sep", "mask"):
            if sp.get(k, -1) >= 0:
                special[sp[k]] = True
        self.special = special
        self.ordinary = torch.nonzero(~special).flatten()
        self.gen = torch.Generator().manual_seed(seed)

    def window(self, rows):
        """(B, W) stream tokens -> (B, W+2) [CLS] row [SEP]."""
        B = rows.shape[0]
        return torch.cat([torch.full((B, 1), self.cls), rows, torch.full((B, 1), self.sep)], dim=1)

    def __call__(self, tokens, step, micro):
        """(inputs, targets) for (B, T) tokens; targets -1 where not chosen."""
        inputs, targets = tokens.clone(), torch.full_like(tokens, -1)
        g = self.gen
        for b in range(tokens.shape[0]):
            cand = torch.nonzero(~self.special[tokens[b]]).flatten()
            if len(cand) == 0:
                continue
            n = max(1, int(math.floor(MASK_RATE * len(cand) + 0.5)))  # Go's math.Round (x >= 0)
            chosen = cand[torch.randperm(len(cand), generator=g)[:n]]
            targets[b, chosen] = tokens[b, chosen]
            r = torch.rand(n, generator=g)
            rand_tok = self.ordinary[torch.randint(len(self.ordinary), (n,), generator=g)]
            new = torch.where(r < 0.8, torch.full_like(rand_tok, self.mask),
                              torch.where(r < 0.9, rand_tok, tokens[b, chosen]))
            inputs[b, chosen] = new
        return inputs, targets


M64, M128 = (1 << 64) - 1, (1 << 128) - 1
PCG_MUL = (2549297995355413924 << 64) | 4865540595714422341
PCG_INC = (6364136223846793005 << 64) | 1442695040888963407


class GoPCG:
    """Go's math/rand/v2 PCG (128-bit LCG, DXSM output) with Rand's IntN and Float64: the same
    numbers as rand.New(rand.NewPCG(seed1, seed2)) draws."""

    def __init__(self, seed1, seed2):
        self.state = ((seed1 & M64) << 64) | (seed2 & M64)

    def uint64(self):
        self.state = (self.state * PCG_MUL + PCG_INC) & M128
        hi, lo = self.state >> 64, self.state & M64
        hi ^= hi >> 32
        hi = (hi * 0xDA942042E4DD58B5) & M64
        hi ^= hi >> 48
        return (hi * (lo | 1)) & M64

    def intn(self, n):
        """Rand.IntN: Lemire's multiply-shift with rejection; a power of two masks."""
        if n & (n - 1) == 0:
            return self.uint64() & (n - 1)
        prod = self.uint64() * n
        if prod & M64 < n:
            thresh = ((1 << 64) - n) % n
            while prod & M64 < thresh:
                prod = self.uint64() * n
        return prod >> 64

    def float64(self):
        return (self.uint64() & ((1 << 53) - 1)) / float(1 << 53)


class GoMasker(Masker):
    """bert.Masker exactly (--masks go, the default): a PCG seeded by (seed, step, micro-batch),
    a partial Fisher-Yates shuffle over the row's non-special positions, one Float64 per chosen
    position, random tokens drawn by rejection from the whole vocabulary. gpt2go's training
    masks use (--seed, step, 0) with 0-based steps; its validation masks use (--seed ^
    VAL_MASK_SEED, 0, batch)."""

    VAL_MASK_SEED = 0x76616C5F6D61736B  # train.valMaskSeed

    def __init__(self, meta, seed):
        super().__init__(meta, 0)
        self.seed = seed & M64
        self.special_list = self.special.tolist()

    def __call__(self, tokens, step, micro):
        rng = GoPCG(self.seed ^ 0x5851F42D4C957F2D, ((step << 20) ^ micro) & M64)
        inputs, targets = tokens.clone(), torch.full_like(tokens, -1)
        rows = tokens.tolist()
        for b, seq in enumerate(rows):
            order = [t for t, tok in enumerate(seq) if not self.special_list[tok]]
            if not order:
                continue
            n = max(1, int(math.floor(MASK_RATE * len(order) + 0.5)))
            for i in range(n):
                j = i + rng.intn(len(order) - i)
                order[i], order[j] = order[j], order[i]
                t = order[i]
                targets[b, t] = seq[t]
                r = rng.float64()
                if r < 0.8:
                    inputs[b, t] = self.mask
                elif r < 0.9:
                    while True:
                        tok = rng.intn(self.V)
                        if not self.special_list[tok]:
                            break
                    inputs[b, t] = tok
        return inputs, targets


# ---- model ------------------------------------------------------------------
def size_fixture_model(V, Vp, C, NH, L, maxT):
    """gen_bert_fixture's classes read their sizes from module globals: set them."""
    if C % NH:
        sys.exit(f"--n-embd {C} must be a multiple of --n-head {NH}")
    fx.V, fx.VP, fx.C, fx.NH, fx.HS, fx.L, fx.MAXT, fx.LN_EPS = V, Vp, C, NH, C // NH, L, maxT, LN_EPS


class MLMBert(fx.TinyBERT):
    """gen_bert_fixture's BERT with the MLM head on the masked positions only (as bert.Model)."""

    def mlm_logits(self, idx, types, rows):
        """Logits (len(rows), V) over the real vocabulary at flat positions rows of (B*T)."""
        b, t = idx.shape
        lengths = torch.full((b,), t, dtype=torch.int64)  # full windows: no padding
        x = self.encode(idx, types, lengths).reshape(-1, fx.C)[rows]
        h = self.headln(self.gelu(self.head(x)))
        return h @ self.wte[:fx.V].t() + self.outb[:fx.V]

    @torch.no_grad()
    def init_gpt2go(self):
        """bert.Model.Init's distribution."""
        for p in [self.wte, self.wpe] + ([self.wtype] if self.wtype is not None else []):
            p.normal_(0.0, 0.02)
        for lin in self.linears():
            lin.weight.normal_(0.0, 0.02)
            lin.bias.zero_()
        for ln in self.layernorms():
            ln.weight.fill_(1.0)
            ln.bias.zero_()
        self.outb.zero_()
        self.wte[fx.V:].zero_()

    def decay_params(self):
        return ([self.wte, self.wpe] + ([self.wtype] if self.wtype is not None else [])
                + [lin.weight for lin in self.linears()])


@torch.no_grad()
def load_gpt2go(model, path):
    """Copies the weights of a gpt2go BERT checkpoint (safetensors, gpt2go-checkpoint format,
    tensors named as bert.Config.ParamSpecs) into model; the AdamW state is not read, so this is
    a start from its weights at a fresh optimizer, which for a step-0 checkpoint is exactly
    gpt2go's start."""
    try:
        with open(path, "rb") as f:
            tensors, meta = fx.ref.read_safetensors(f.read())
    except OSError as e:
        sys.exit(f"--init-from {path}: {e.strerror}; give a gpt2go checkpoint file "
                 "(RUN/checkpoints/step_NNNNNNNN.safetensors)")
    except (ValueError, KeyError, struct.error) as e:
        sys.exit(f"--init-from {path}: not a safetensors file ({e})")
    if meta.get("format") != "gpt2go-checkpoint" or json.loads(meta.get("config", "{}")).get("arch") != "bert":
        sys.exit(f"--init-from {path}: not a gpt2go BERT checkpoint")
    for name, p in model.gpt2go_params():
        ps = p if isinstance(p, list) else [p]
        want = (len(ps),) + tuple(ps[0].shape) if isinstance(p, list) else tuple(p.shape)
        t = tensors.get(name)
        if t is None or tuple(t.shape) != want:
            got = "missing" if t is None else f"shape {tuple(t.shape)}"
            sys.exit(f"--init-from {path}: tensor {name} is {got}, this model needs {want}; "
                     "give the same --n-layer/--n-head/--n-embd/--block-size/--pre-ln as the gpt2go run")
        src = torch.from_numpy(np.array(t, dtype=np.float32))
        for i, q in enumerate(ps):
            q.copy_(src[i] if isinstance(p, list) else src)
    print(f"init: the weights of {path} (gpt2go step {meta.get('step', '?')})")


def mlm_step(model, inputs, targets):
    """(mean loss tensor, summed loss, correct, masked) of one masked batch."""
    rows = torch.nonzero(targets.reshape(-1) >= 0).flatten()
    tgt = targets.reshape(-1)[rows]
    logits = model.mlm_logits(inputs, torch.zeros_like(inputs), rows)
    loss_sum = F.cross_entropy(logits, tgt, reduction="sum")
    correct = int((logits.detach().argmax(dim=1) == tgt).sum())
    return loss_sum / len(rows), float(loss_sum.detach()), correct, len(rows)


def lr_at(step, a):
    """train.Config.LRAt."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.lr_schedule == "constant" or a.steps <= a.warmup:
        return a.lr
    ratio = min(max((step - a.warmup) / (a.steps - a.warmup), 0.0), 1.0)
    if a.lr_schedule == "linear":
        return a.lr - (a.lr - a.min_lr) * ratio
    return a.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


@torch.no_grad()
def evaluate(model, eval_set):
    total, correct, masked = 0.0, 0, 0
    for inputs, targets in eval_set:
        _, s, c, m = mlm_step(model, inputs, targets)
        total, correct, masked = total + s, correct + c, masked + m
    return total / masked, correct / masked


# ---- main -------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="directory made by gpt2go prepare --bert-specials")
    p.add_argument("--mask-fixture", metavar="PATH",
                   help="only write GoMasker's masks for a few cases to PATH (JSON) and exit: "
                        "bert/mask_test.go checks that Go's bert.Masker draws the same")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--block-size", type=int, default=0,
                   help="rows of wpe (default: --seq-len; only the first T rows take part)")
    p.add_argument("--pad-vocab", type=int, default=0, help="round wte/outb rows up to a multiple of this")
    p.add_argument("--pre-ln", action="store_true", help="pre-LN blocks with a final LayerNorm")
    p.add_argument("--seq-len", type=int, default=128, help="T, [CLS] and [SEP] included")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--lr-schedule", choices=["cosine", "linear", "constant"], default="cosine")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0 = off")
    p.add_argument("--eval-every", type=int, default=100, help="0 = only at the end")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--masks", choices=["go", "torch"], default="go",
                   help="go: gpt2go's masks draw for draw (bert.Masker with Go's PCG); torch: the same "
                        "rule from a torch generator")
    p.add_argument("--eval-seed", type=int, default=0x5eed,
                   help="seed of the fixed validation masks with --masks torch")
    p.add_argument("--init-from", help="start from this gpt2go checkpoint's weights (a step-0 "
                   "checkpoint, RUN/checkpoints/step_00000000.safetensors, gives gpt2go's initial "
                   "weights) instead of drawing them")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--json", help="write the summary here")
    a = p.parse_args(argv)
    if a.mask_fixture:
        return a
    if not a.data:
        p.error("--data is required")
    if a.seq_len < 3:
        p.error("--seq-len must be >= 3 ([CLS] + a token + [SEP])")
    if a.steps < 1 or a.batch_size < 1 or a.eval_batches < 1 or a.log_every < 1:
        p.error("--steps, --batch-size, --eval-batches and --log-every must be >= 1")
    a.block_size = a.block_size or a.seq_len
    if a.block_size < a.seq_len:
        p.error(f"--block-size {a.block_size} < --seq-len {a.seq_len}")
    return a


def write_mask_fixture(path):
    """GoMasker's inputs and targets for token rows with specials (a [PAD] tail, [CLS]/[SEP]) in
    two vocabularies (69 ids, char + specials; 64, a power of two: Rand.IntN's masking branch),
    at seeds, steps and micro-batches that exercise every bit of the PCG's seeding."""
    cases = []
    for V, specials, seed, step, micro in [
            (69, {"pad": 65, "unk": -1, "cls": 66, "sep": 67, "mask": 68}, 1337, 0, 0),
            (69, {"pad": 65, "unk": -1, "cls": 66, "sep": 67, "mask": 68}, 1337, 5, 2),
            (69, {"pad": 65, "unk": -1, "cls": 66, "sep": 67, "mask": 68}, 1337 ^ GoMasker.VAL_MASK_SEED, 0, 7),
            (64, {"pad": 60, "unk": 61, "cls": 62, "sep": 63, "mask": 59}, (1 << 64) - 3, 123456, 1)]:
        B, T = 3, 40
        meta = {"vocab_size": V, "specials": specials}
        mk = GoMasker(meta, seed)
        ordinary = mk.ordinary.tolist()
        rows = []
        for b in range(B):
            n = T - 2 - (9 if b == 1 else 0)  # row 1 ends in [PAD]s
            body = [ordinary[(i * 7 + 3 * b + 1) % len(ordinary)] for i in range(n)]
            rows.append([specials["cls"]] + body + [specials["sep"]] + [specials["pad"]] * (T - 2 - n))
        tokens = torch.tensor(rows, dtype=torch.int64)
        inputs, targets = mk(tokens, step, micro)
        cases.append({"vocab_size": V, "specials": specials, "seed": str(seed), "step": step, "micro": micro,
                      "B": B, "T": T, "tokens": sum(rows, []), "inputs": inputs.flatten().tolist(),
                      "targets": targets.flatten().tolist()})
    with open(path, "w") as f:
        json.dump({"generator": "tools/reference/shakespeare_bert.py --mask-fixture", "cases": cases}, f)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


def main(argv):
    a = parse_args(argv)
    if a.mask_fixture:
        write_mask_fixture(a.mask_fixture)
        return 0
    torch.set_num_threads(a.threads)
    B, T = a.batch_size, a.seq_len
    W = T - 2
    train_shards, val_shards, meta = open_dataset(a.data)
    V = int(meta["vocab_size"])
    Vp = (V + a.pad_vocab - 1) // a.pad_vocab * a.pad_vocab if a.pad_vocab > 1 else V

    size_fixture_model(V, Vp, a.n_embd, a.n_head, a.n_layer, a.block_size)
    torch.manual_seed(a.seed)
    model = MLMBert(pre_ln=a.pre_ln, tanh_gelu=False, type_vocab=2)
    if a.init_from:
        load_gpt2go(model, a.init_from)
    else:
        model.init_gpt2go()
    n_params = sum(p.numel() for p in model.parameters())

    decay = model.decay_params()
    decay_ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in decay_ids]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)

    loader = SequentialLoader(train_shards, B, W)
    if a.masks == "go":
        masker, eval_masker = GoMasker(meta, a.seed), GoMasker(meta, a.seed ^ GoMasker.VAL_MASK_SEED)
    else:
        masker, eval_masker = Masker(meta, a.seed), Masker(meta, a.eval_seed)
    eval_set = [eval_masker(eval_masker.window(rows), 0, i)
                for i, rows in enumerate(spread_rows(val_shards, B, W, a.eval_batches))]

    print(f"model: BERT {'pre' if a.pre_ln else 'post'}-LN L={a.n_layer} NH={a.n_head} C={a.n_embd} "
          f"V={V} Vp={Vp} maxT={a.block_size}, {n_params} params; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"data: {sum(map(len, train_shards))} train / {sum(map(len, val_shards))} val tokens; "
          f"B={B} T={T} ({B * W} stream tokens a step); eval {a.eval_batches}x{B} rows")
    sys.stdout.flush()

    losses, times, val_loss, val_acc, history = [], [], None, None, []
    for step in range(a.steps):
        t0 = time.perf_counter()
        lr = lr_at(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        inputs, targets = masker(masker.window(loader.next()), step, 0)
        opt.zero_grad(set_to_none=True)
        loss, _, correct, masked = mlm_step(model, inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip) if a.grad_clip > 0 else None
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        times.append(dt)
        n = step + 1
        if n % a.log_every == 0 or n == 1 or n == a.steps:
            gn = f" norm {norm.item():.3f}" if norm is not None else ""
            print(f"step {n:5d}/{a.steps} | loss {losses[-1]:.4f} | acc {correct / masked:.4f} | "
                  f"lr {lr:.3e}{gn} | {dt * 1000:.0f} ms")
        if (a.eval_every > 0 and n % a.eval_every == 0) or n == a.steps:
            val_loss, val_acc = evaluate(model, eval_set)
            history.append({"step": n, "val_loss": val_loss, "val_acc": val_acc})
            print(f"val  {n:5d} | loss {val_loss:.4f} | acc {val_acc:.4f}")
        sys.stdout.flush()

    final_train = statistics.fmean(losses[-20:])
    ms = statistics.median(times[1:] if len(times) > 1 else times) * 1000
    print(f"done: {a.steps} steps, final train loss (mean of last {min(20, len(losses))}) {final_train:.4f}, "
          f"val loss {val_loss:.4f}, val acc {val_acc:.4f}, {ms:.0f} ms/step (median, step 1 excluded), "
          f"train stream wrapped {loader.wraps}x")
    if a.json:
        out = {"steps": a.steps, "final_train_loss": final_train, "val_loss": val_loss, "val_acc": val_acc,
               "ms_per_step": ms, "params": n_params, "torch_version": torch.__version__,
               "threads": torch.get_num_threads(), "val_history": history, "train_losses": losses,
               "config": vars(a)}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
