#!/usr/bin/env python3
"""Runs the gemm micro-kernels' machine code in a small x86 simulator, for CPUs that cannot.

The AVX-512 kernel (sgemmKernel12x32 in backend/cpu/gemm_amd64.s) cannot execute on a machine
without AVX-512, and QEMU's user-mode emulator does not implement AVX-512 either. This script
disassembles a built binary with GNU objdump (which decodes EVEX), interprets the instructions the
kernels use on a word-addressed memory in which only the kernel's inputs are mapped and only its
output tile is writable, and compares the result with a float64 reference. So it checks the
encoded instructions' addressing, loop counts and register use, not the hardware's FMA rounding.
The AVX2 kernel (sgemmKernel6x16) runs through the same simulator, which checks the simulator
against a kernel that the Go tests run on real hardware.

    go test -c -o /tmp/cpu.test ./backend/cpu
    python3 tools/asmsim.py /tmp/cpu.test

Exit status 0 when every case matches. Needs only python3 and objdump (binutils).
"""
import random
import re
import subprocess
import sys

PKG = "github.com/gpt2go/gpt2go/backend/cpu"


class Fault(Exception):
    pass


def disassemble(binary, symbol):
    out = subprocess.run(["objdump", "-d", "-M", "intel", "--no-show-raw-insn", binary],
                         check=True, capture_output=True, text=True).stdout
    start = out.find(f"<{PKG}.{symbol}.abi0>:")
    if start < 0:
        raise SystemExit(f"asmsim: {symbol} not found in {binary}")
    insns = {}
    for line in out[start:].splitlines()[1:]:
        if not line.strip():
            break
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if m:
            insns[int(m.group(1), 16)] = (m.group(2), m.group(3).split(" <")[0].strip())
    return insns


def split_operands(ops):
    parts, depth, cur = [], 0, ""
    for ch in ops:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


class Machine:
    def __init__(self):
        self.gpr = {}
        self.vec = {}  # "zmm3" -> list of 16 floats (ymm aliases the low 8)
        self.mem = {}  # byte address (multiple of 4) -> float or int
        self.writable = set()
        self.flags = 0  # last compare: sign of (a - b)

    # -- operands
    def addr(self, op):
        m = re.search(r"\[(.*)\]", op)
        total = 0
        for term in re.split(r"\+|(?=-)", m.group(1).replace(" ", "")):
            if not term:
                continue
            if "*" in term:
                reg, scale = term.split("*")
                total += self.gpr[reg] * int(scale, 0)
            elif re.match(r"^-?0x[0-9a-f]+$|^-?\d+$", term):
                total += int(term, 0)
            else:
                total += self.gpr[term]
        return total

    def load(self, a):
        if a % 4:
            raise Fault(f"unaligned 4-byte access at {a:#x}")
        if a not in self.mem:
            raise Fault(f"read of unmapped address {a:#x}")
        return self.mem[a]

    def store(self, a, v):
        if a not in self.writable:
            raise Fault(f"write outside the output tile at {a:#x}")
        self.mem[a] = v

    def value(self, op):
        if op in self.gpr:
            return self.gpr[op]
        if "PTR" in op:
            return self.load(self.addr(op))
        return int(op, 0)

    def vreg(self, name):
        lanes = 16 if name.startswith("zmm") else 8
        z = self.vec.setdefault("zmm" + name[3:], [0.0] * 16)
        return z, lanes

    # -- execution
    def run(self, insns, max_steps=10_000_000):
        pc = min(insns)
        for _ in range(max_steps):
            op, args = insns[pc]
            ops = split_operands(args)
            nxt = min((a for a in insns if a > pc), default=None)
            if op == "ret":
                return
            elif op == "mov":
                self.gpr[ops[0]] = self.value(ops[1])
            elif op == "lea":
                self.gpr[ops[0]] = self.addr(ops[1])
            elif op == "shl":
                self.gpr[ops[0]] <<= int(ops[1], 0)
            elif op == "add":
                self.gpr[ops[0]] += self.value(ops[1])
            elif op == "sub":
                self.gpr[ops[0]] -= self.value(ops[1])
                self.flags = self.gpr[ops[0]]
            elif op == "dec":
                self.gpr[ops[0]] -= 1
                self.flags = self.gpr[ops[0]]
            elif op == "cmp":
                self.flags = self.value(ops[0]) - self.value(ops[1])
            elif op == "test":
                self.flags = self.value(ops[0]) & self.value(ops[1])
            elif op in ("jl", "jge", "je", "jne", "jmp"):
                taken = {"jl": self.flags < 0, "jge": self.flags >= 0, "je": self.flags == 0,
                         "jne": self.flags != 0, "jmp": True}[op]
                if taken:
                    nxt = int(ops[0], 16)
            elif op == "prefetcht0":
                pass  # a hint: may name any address
            elif op == "vzeroupper":
                for z in self.vec.values():
                    z[8:] = [0.0] * 8
            elif op == "vmovups":
                if "PTR" in ops[1]:  # load
                    z, lanes = self.vreg(ops[0])
                    a = self.addr(ops[1])
                    z[:lanes] = [self.load(a + 4 * i) for i in range(lanes)]
                    if lanes == 8:
                        z[8:] = [0.0] * 8  # VEX zeroes the upper lanes
                else:  # store
                    z, lanes = self.vreg(ops[1])
                    a = self.addr(ops[0])
                    for i in range(lanes):
                        self.store(a + 4 * i, z[i])
            elif op == "vbroadcastss":
                z, lanes = self.vreg(ops[0])
                z[:lanes] = [self.load(self.addr(ops[1]))] * lanes
                if lanes == 8:
                    z[8:] = [0.0] * 8
            elif op == "vfmadd231ps":  # dst += src1 * src2
                d, lanes = self.vreg(ops[0])
                s1, _ = self.vreg(ops[1])
                s2, _ = self.vreg(ops[2])
                for i in range(lanes):
                    d[i] += s1[i] * s2[i]
                if lanes == 8:
                    d[8:] = [0.0] * 8
            else:
                raise Fault(f"instruction not simulated: {op} {args}")
            if nxt is None:
                raise Fault("ran off the end of the function")
            pc = nxt
        raise Fault("did not return")


def run_case(insns, mr, panels_a, nr, panels_b, kc, ldc, init_mode, rng):
    """Runs one kernel call: an (mr*panels_a) x (nr*panels_b) tile, returns an error or None."""
    m = Machine()
    rows, cols = mr * panels_a, nr * panels_b
    base_a, base_b, base_c, base_bias, stack = 0x10000, 0x200000, 0x400000, 0x600000, 0x800000
    a = [rng.uniform(-1, 1) for _ in range(rows * kc)]  # panels back to back: panel p at p*mr*kc
    b = [rng.uniform(-1, 1) for _ in range(cols * kc)]  # panel q at q*nr*kc
    bias = [rng.uniform(-1, 1) for _ in range(cols)]
    c0 = [rng.uniform(-1, 1) for _ in range(rows * ldc)]
    for i, v in enumerate(a):
        m.mem[base_a + 4 * i] = v
    for i, v in enumerate(b):
        m.mem[base_b + 4 * i] = v
    for i, v in enumerate(bias):
        m.mem[base_bias + 4 * i] = v
    for i, v in enumerate(c0):
        m.mem[base_c + 4 * i] = v
        if i % ldc < cols:
            m.writable.add(base_c + 4 * i)
    if init_mode == "c":
        init, stride = base_c, ldc
    else:
        init, stride = base_bias, 0
    # ABI0: arguments on the stack above the return address.
    for i, v in enumerate([kc, base_a, base_b, base_c, ldc, init, stride]):
        m.mem[stack + 8 + 8 * i] = v
    m.gpr = {"rsp": stack}
    try:
        m.run(insns)
    except Fault as e:
        return str(e)
    for r in range(rows):
        for j in range(cols):
            ref = c0[r * ldc + j] if init_mode == "c" else bias[j]
            pa, pr = divmod(r, mr)
            pb, pj = divmod(j, nr)
            for k in range(kc):
                ref += a[pa * mr * kc + k * mr + pr] * b[pb * nr * kc + k * nr + pj]
            got = m.mem[base_c + 4 * (r * ldc + j)]
            if abs(got - ref) > 1e-9 * (1 + abs(ref)):
                return f"c[{r},{j}] = {got}, want {ref}"
        for j in range(cols, ldc):  # padding columns keep their values (writes there already fault)
            if m.mem[base_c + 4 * (r * ldc + j)] != c0[r * ldc + j]:
                return f"c[{r},{j}] changed"
    return None


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "/tmp/cpu.test"
    rng = random.Random(7)
    kernels = [("sgemmKernel6x16", 6, 1, 16, 1), ("sgemmKernel12x32", 6, 2, 16, 2)]
    failures = 0
    for symbol, mr, pa, nr, pb in kernels:
        insns = disassemble(binary, symbol)
        cases = 0
        for kc in (0, 1, 2, 3, 4, 5, 7, 9, 33):
            for ldc in (nr * pb, nr * pb + 5):
                for init_mode in ("c", "bias"):
                    err = run_case(insns, mr, pa, nr, pb, kc, ldc, init_mode, rng)
                    cases += 1
                    if err:
                        failures += 1
                        print(f"FAIL {symbol} kc={kc} ldc={ldc} init={init_mode}: {err}")
        print(f"asmsim: {symbol}: {cases} cases, {len(insns)} instructions")
    if failures:
        print(f"asmsim: {failures} failures")
        return 1
    print("asmsim: all cases match the float64 reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
