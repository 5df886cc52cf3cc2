"""SASS instructions per 16-token chunk step of the forward's recurrence kernels (cuda_fast/csrc/kda_fwd.cu, sm_90a).

    python -m benchmarks.sass_steps [--rev REV] [--ops] [--nvcc PATH] [--nvdisasm PATH] [--keep DIR]

Compiles kda_fwd.cu (this tree's, or ``git show REV:`` of it and common.cuh) for sm_90a with the library's flags
(`cuda_fast.build`) and ``-Xptxas -v``, disassembles the cubin with nvdisasm and, for each state kernel the host code
launches (``kda_state_fwd_kernel<BV>`` on BV * 2 threads, ``kda_state_fwd_wgmma_kernel`` on 128; BV value columns
per CTA), finds the chunk loop (the outermost backward branch whose body holds the HMMA / HGMMA) and counts the
instructions each warp issues in one iteration of it.

The count follows the path, not the static listing: each lane is emulated from the kernel entry on the integer
instructions that decide branches (the tid-strided load and store loops with their peeled remainders and unrolled
bodies, load_stage's if / else), so every block counts as often as that lane runs it. A branch on a value the
emulation cannot know (kernel arguments, loaded data: ``c + 3 < nch``, ``c * 16 + r < len``) falls through, which
runs the prefetch and the output stores (a long sequence's steady state); these branches are listed. The second
iteration is recorded; a warp issues an instruction as often as its busiest lane. Per head: the sum over the warps
of the 128 / BV CTAs that cover one head's 128 x 128 state.

Static counts, not timings: no latency, no dual issue, no bank conflicts; predicated-off instructions count (they
issue); an HGMMA counts once per warp though one does 64 x N x 16 MACs per warpgroup (MAC/head checks that every
kernel does the same math per step).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from cuda_fast.build import COMPILE_FLAGS, CSRC, BuildError, gencode, nvcc_path

SOURCE, HEADER, D = "kda_fwd.cu", "common.cuh", 128
INSN = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@(!?U?P[0-6T])\s+)?(\S+)\s*(.*?)\s*;")
LAUNCH = re.compile(r"(kda_state_fwd_\w*?kernel)(?:<(\d+)>)?<<<grid2, (\d+),")
REG, PRED = re.compile(r"U?R\d+$"), re.compile(r"U?P[0-6T]$")
M32 = 0xFFFFFFFF
CLASSES = ("HMMA", "HGMMA", "LDSM", "LDS", "STS", "LDGSTS", "LDG/STG", "F2F(P)", "FMUL/FFMA/FADD", "BAR/sync",
           "BRA/BSSY/BSYNC", "int/addr", "other")
SYNC = ("BAR", "DEPBAR", "LDGDEPBAR", "WARPGROUP", "MEMBAR", "FENCE", "WARPSYNC", "ERRBAR", "CCTL")


def klass(guard: str | None, op: str) -> str:
    base = op.split(".")[0]
    if guard == "!PT" or base == "NOP":
        return "other"  # never-executed placeholders (``@!PT LDS RZ, [RZ]``) and NOPs: they issue, they do nothing
    table = {"HMMA": "HMMA", "HGMMA": "HGMMA", "LDSM": "LDSM", "LDS": "LDS", "STS": "STS", "STSM": "STS",
             "LDGSTS": "LDGSTS", "LDG": "LDG/STG", "STG": "LDG/STG", "F2F": "F2F(P)", "F2FP": "F2F(P)",
             "FMUL": "FMUL/FFMA/FADD", "FFMA": "FMUL/FFMA/FADD", "FADD": "FMUL/FFMA/FADD",
             "BRA": "BRA/BSSY/BSYNC", "BSSY": "BRA/BSSY/BSYNC", "BSYNC": "BRA/BSSY/BSYNC"}
    return "BAR/sync" if base in SYNC else table.get(base, "int/addr")


def macs(op: str) -> float:
    """Multiply-accumulates one warp's issue of ``op`` does: m16n8k16 per HMMA, a quarter of 64 x N x 16 per HGMMA."""
    if op.startswith("HMMA.16816"):
        return 16 * 8 * 16
    m = re.match(r"HGMMA\.64x(\d+)x16", op)
    return 64 * int(m[1]) * 16 / 4 if m else 0


def width(op: str) -> int:
    """Registers an instruction's first destination spans (all become unknown when the emulation skips its value)."""
    if m := re.match(r"HGMMA\.64x(\d+)x", op):
        return int(m[1]) // 2
    if op.startswith("HMMA"):
        return 4
    if op.startswith("LDSM"):
        return int(op.rsplit(".", 1)[1])
    return 4 if ".128" in op else 2 if ".64" in op or "WIDE" in op or op.startswith("CS2R") else 1


def s32(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def lut3(a: int, b: int, c: int, lut: int, bits: int = 32) -> int:
    full = (1 << bits) - 1
    out = 0
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c) & full
    return out


class Lane:
    """One thread's integer registers and predicates (absent: unknown) and the semantics of the instructions that
    decide branches; any other instruction makes its destinations unknown."""

    def __init__(self, tid: int):
        self.tid, self.r = tid, {}

    def val(self, tok: str):
        tok = tok.replace(".reuse", "")
        if tok[0] in "!~-":
            v = self.val(tok[1:])
            return None if v is None else (not v) if tok[0] == "!" else (~v if tok[0] == "~" else -v) & M32
        if tok in ("RZ", "URZ"):
            return 0
        if tok in ("PT", "UPT"):
            return True
        if re.fullmatch(r"0x[0-9a-f]+|\d+", tok):
            return int(tok, 0) & M32
        return self.r.get(tok)

    def pair(self, tok: str):  # a 64-bit register pair
        if tok in ("RZ", "URZ"):
            return 0
        lo, hi = self.val(tok), self.val(re.sub(r"\d+", lambda m: str(int(m[0]) + 1), tok, count=1))
        return None if lo is None or hi is None else hi << 32 | lo

    def results(self, op: str, ops: list[str]) -> dict:
        """{destination: value or None} of one instruction."""
        base, *mods = op.split(".")
        if base[0] == "U" and base[1:] in ("MOV", "IADD3", "IMAD", "LOP3", "SHF", "LEA", "ISETP", "PLOP3", "SEL"):
            base = base[1:]
        if base in ("ISETP", "PLOP3"):
            dst, src = ops[:2], ops[2:]
        else:  # leading predicates, one register, trailing predicates (LOP3 P0, R1, ..; IADD3 R1, P0, P1, ..)
            i = 0
            while i < len(ops) and PRED.match(ops[i]):
                i += 1
            if i == len(ops) or not (REG.match(ops[i]) or ops[i] in ("RZ", "URZ")):
                return {}
            i += 1
            while i < len(ops) and PRED.match(ops[i]):
                i += 1
            dst, src = ops[:i], ops[i:]
        regs = [t for t in dst if not PRED.match(t)]
        out = {t: None for t in dst}
        if regs:  # every register a wide destination covers
            r0 = regs[0]
            for k in range(1, width(op) if r0 not in ("RZ", "URZ") else 1):
                out[re.sub(r"\d+", str(int(re.search(r"\d+", r0)[0]) + k), r0)] = None
        v = [self.val(t) for t in src]
        known = all(x is not None for x in v)
        if base == "MOV" and known:
            out[regs[0]] = v[0]
        elif base in ("S2R", "S2UR"):
            out[regs[0]] = {"SR_TID.X": self.tid, "SR_TID.Y": 0, "SR_TID.Z": 0, "SR_LANEID": self.tid & 31}.get(src[0])
        elif base == "CS2R" and src == ["SRZ"]:
            out.update({k: 0 for k in out})
        elif base == "R2UR" and known:
            out[regs[0]] = v[0]
        elif base == "IMAD" and "WIDE" in mods:
            a, b, c = v[0], v[1], self.pair(src[2])
            if a is not None and b is not None and c is not None:
                a, b = (a, b) if "U32" in mods else (s32(a), s32(b))
                x = (a * b + c) & (1 << 64) - 1
                hi = re.sub(r"\d+", lambda m: str(int(m[0]) + 1), regs[0], count=1)
                out.update({regs[0]: x & M32, hi: x >> 32})
        elif base == "IMAD" and known and not {"HI", "X"} & set(mods):
            out[regs[0]] = (v[0] * v[1] + v[2]) & M32
        elif base in ("IADD3", "VIADD") and known and "X" not in mods:
            out[regs[0]] = sum(v) & M32  # carry-outs stay unknown: they feed 64-bit address arithmetic only
        elif base == "LOP3" and known:
            x = lut3(v[0], v[1], v[2], v[3])
            out.update({t: (x != 0) if PRED.match(t) else x for t in dst if t not in ("PT", "UPT")})
        elif base == "SHF" and known and not {"X"} & set(mods):
            lo, sh, hi = v[0], v[1] & 63, v[2]
            x = (s32(hi) if "S32" in mods or "S64" in mods else hi) << 32 | lo
            x = x << sh if "L" in mods else x >> sh
            out[regs[0]] = (x >> 32 if "HI" in mods else x) & M32
        elif base == "LEA" and known and "X" not in mods and "SX32" not in mods:
            if "HI" in mods:  # LEA.HI d, a, b, c, sh: b + ({c:a} >> (32 - sh))
                out[regs[0]] = (v[1] + ((v[2] << 32 | v[0]) >> (32 - v[3]))) & M32
            else:  # LEA d, a, b, sh: (a << sh) + b
                out[regs[0]] = ((v[0] << v[2]) + v[1]) & M32
        elif base in ("VIMNMX", "IMNMX") and known:
            a, b = (v[0], v[1]) if "U32" in mods else (s32(v[0]), s32(v[1]))
            out[regs[0]] = (min(a, b) if v[2] else max(a, b)) & M32
        elif base == "SEL" and known:
            out[regs[0]] = v[0] if v[2] else v[1]
        elif base == "ISETP" and "EX" not in mods and None not in v[:2]:
            a, b = (v[0], v[1]) if "U32" in mods else (s32(v[0]), s32(v[1]))
            cmp = {"LT": a < b, "LE": a <= b, "GT": a > b, "GE": a >= b, "EQ": a == b, "NE": a != b}[mods[0]]
            pc = v[2] if len(v) > 2 else True
            bop = {"AND": lambda x, y: x and y, "OR": lambda x, y: x or y, "XOR": lambda x, y: x != y}[mods[-1]]
            if pc is not None:
                out.update({dst[0]: bop(cmp, pc), dst[1]: bop(not cmp, pc)})
        elif base == "PLOP3" and None not in v[:3]:
            out.update({dst[0]: bool(lut3(*map(int, v[:3]), v[3], 1)), dst[1]: bool(lut3(*map(int, v[:3]), v[4], 1))})
        out.pop("PT", None), out.pop("UPT", None), out.pop("RZ", None), out.pop("URZ", None)
        return out


def parse(sass: str) -> dict[str, tuple[list, dict]]:
    """{function: (instructions (address, guard, op, operands), {label: instruction index})} of nvdisasm's text."""
    funcs, name = {}, None
    for line in sass.splitlines():
        if m := re.match(r"\s*\.text\.(\S+):$", line):
            name = m[1]
            funcs[name] = ([], {})
        elif name and (m := re.match(r"(\.L_x_\d+):", line)):
            funcs[name][1][m[1]] = len(funcs[name][0])
        elif name and (m := INSN.search(line)):
            ops = [t.strip() for t in m[4].split(",")] if m[4] else []
            funcs[name][0].append((int(m[1], 16), m[2], m[3], ops))
    return funcs


def target(ops: list[str]) -> str:
    return re.search(r"\((\.L_x_\d+)\)", ops[-1])[1]


def chunk_loop(insns: list, labels: dict) -> tuple[int, int]:
    """(header, back-edge branch) indices: the widest backward branch whose body holds an HMMA or HGMMA."""
    best = None
    for i, (_, _, op, ops) in enumerate(insns):
        if op.startswith("BRA") and (h := labels[target(ops)]) <= i and (best is None or i - h > best[1] - best[0]):
            if any(x[2].startswith(("HMMA", "HGMMA")) for x in insns[h:i]):
                best = (h, i)
    if best is None:
        raise SystemExit("no backward branch around an HMMA / HGMMA: not the chunk loop this script knows")
    return best


def walk(insns: list, labels: dict, loop: tuple[int, int], tid: int, record: int = 1, limit: int = 10**6):
    """Instruction indices lane ``tid`` runs in iteration ``record`` of the chunk loop, and the branches it let fall
    through because their predicate was unknown."""
    head, back = loop
    lane, pc, it, trace, guessed = Lane(tid), 0, 0, [], set()
    for _ in range(limit):
        addr, guard, op, ops = insns[pc]
        g = True if guard is None else lane.val(guard)
        if it == record:
            trace.append(pc)
        if pc == back:  # the chunk loop's back edge: taken until the recorded iteration is over
            if it == record:
                return trace, guessed
            it, pc = it + 1, head
            continue
        if op.startswith("BRA") or op.startswith("EXIT"):
            if g is None and it == record:
                guessed.add(f"{addr:#x} @{guard} {op}")
            if g and op.startswith("EXIT"):
                raise SystemExit(f"lane {tid} exited at {addr:#x} before the recorded iteration ended")
            pc = labels[target(ops)] if g and op.startswith("BRA") else pc + 1
            continue
        if g is not False:
            for k, x in lane.results(op, ops).items():
                lane.r[k] = x if g or lane.r.get(k) == x else None
        pc += 1
    raise SystemExit(f"lane {tid}: no end of iteration {record} within {limit} instructions")


def compile_cubin(src_dir: Path, out: Path, nvcc: str) -> tuple[dict[str, dict[str, int]], str]:
    """nvcc -cubin for sm_90a: ({mangled kernel: ptxas -v numbers (registers, stack, spill stores / loads bytes)},
    ptxas's log)."""
    cmd = [nvcc, *COMPILE_FLAGS, "-cubin", *gencode("90a"), "-Xptxas", "-v", "-o", str(out), str(src_dir / SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"nvcc failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    info, name = {}, None
    for line in proc.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            name = m[1]
            info[name] = {}
        elif name and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                      line)):
            info[name].update(stack=int(m[1]), spill_st=int(m[2]), spill_ld=int(m[3]))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            info[name]["regs"] = int(m[1])
    return info, proc.stderr


def find_nvdisasm(nvcc: str, given: str | None) -> str | None:
    """--nvdisasm, else PATH, else beside nvcc, else the copy Triton ships."""
    spec = importlib.util.find_spec("triton")
    triton_bin = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "nvdisasm" if spec and spec.origin else None
    for cand in (given, shutil.which("nvdisasm"), Path(nvcc).resolve().parent / "nvdisasm", triton_bin):
        if cand and Path(cand).is_file():
            return str(cand)
    return None


def table(rows: list[list], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "--:" for i in range(len(head))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sass_steps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rev", help="measure kda_fwd.cu of this git revision (git show REV:...) instead of the tree's")
    p.add_argument("--nvcc", help="nvcc to use (default: cuda_fast.build's: CUDA_HOME, CUDA_PATH, PATH)")
    p.add_argument("--nvdisasm", help="nvdisasm to use (default: PATH, beside nvcc, then Triton's copy)")
    p.add_argument("--ops", action="store_true", help="also print each kernel's per-head count by opcode")
    p.add_argument("--keep", type=Path, help="also write the cubin, the SASS and the ptxas log to this folder")
    args = p.parse_args(argv)
    try:
        nvcc = args.nvcc or nvcc_path()
    except BuildError as e:
        print(f"sass_steps: {e}", file=sys.stderr)
        return 1
    if not Path(nvcc).is_file() and not shutil.which(nvcc):
        print(f"sass_steps: nvcc {nvcc} not found", file=sys.stderr)
        return 1
    nvdisasm = find_nvdisasm(nvcc, args.nvdisasm)
    if nvdisasm is None:
        print("sass_steps: nvdisasm not found (give --nvdisasm, put it on PATH, or install triton, which ships one)",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in (SOURCE, HEADER):
            if args.rev:
                git = subprocess.run(["git", "show", f"{args.rev}:cuda_fast/csrc/{name}"], capture_output=True,
                                     text=True, cwd=CSRC)
                if git.returncode != 0:
                    print(f"sass_steps: git show {args.rev}:cuda_fast/csrc/{name}: {git.stderr.strip()}",
                          file=sys.stderr)
                    return 1
            (tmp / name).write_text(git.stdout if args.rev else (CSRC / name).read_text())
        source = (tmp / SOURCE).read_text()
        info, log = compile_cubin(tmp, tmp / "kda_fwd.sm90a.cubin", nvcc)
        sass = subprocess.run([nvdisasm, "-c", str(tmp / "kda_fwd.sm90a.cubin")], capture_output=True, text=True,
                              check=True).stdout
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / "kda_fwd.sm90a.cubin", args.keep)
            (args.keep / "kda_fwd.sm90a.sass").write_text(sass)
            (args.keep / "ptxas.log").write_text(log)
    funcs = parse(sass)
    print(f"source: {'git ' + args.rev if args.rev else CSRC / SOURCE}; nvcc: {nvcc}; nvdisasm: {nvdisasm}\n")
    counts, facts, notes, by_op = [], [], {}, []
    for kernel, tmpl, threads in LAUNCH.findall(source):
        bv = int(tmpl) if tmpl else int(re.search(rf"{kernel}\(.*?constexpr int BV = (\d+)", source, re.S)[1])
        pat = rf"{len(kernel)}{kernel}" + (rf"ILi{tmpl}E" if tmpl else "E")
        mangled = next((f for f in funcs if re.search(pat, f)), None)
        if mangled is None:
            raise SystemExit(f"{kernel}<{tmpl}> is launched but not in the cubin (pattern {pat})")
        label = f"{kernel}<{tmpl}>" if tmpl else kernel
        insns, labels = funcs[mangled]
        loop = chunk_loop(insns, labels)
        warps, ctas = int(threads) // 32, D // bv
        head, head_macs, ops = Counter(), 0.0, Counter()
        for w in range(warps):
            per_insn, guessed = Counter(), set()
            for lane in range(32):  # a warp issues an instruction as often as its busiest lane runs it
                trace, g = walk(insns, labels, loop, 32 * w + lane)
                per_insn |= Counter(trace)
                guessed |= g
            by = Counter()
            for i, n in per_insn.items():
                by[klass(insns[i][1], insns[i][2])] += n
                head_macs += macs(insns[i][2]) * n * ctas
                ops[("@!PT " if insns[i][1] == "!PT" else "") + insns[i][2]] += n * ctas
            head.update({k: n * ctas for k, n in by.items()})
            counts.append([label, f"warp {w}", sum(by.values()), *(by[c] for c in CLASSES)])
            notes[label] = notes.get(label, set()) | guessed
        counts.append([f"**{label}**", f"**per head ({ctas} CTAs x {warps} warps)**", f"**{sum(head.values())}**",
                       *(f"**{head[c]}**" for c in CLASSES)])
        by_op.append(f"- {label}: " + ", ".join(f"{k} {n}" for k, n in ops.most_common()))
        r = info[mangled]
        h, b = loop
        facts.append([label, threads, bv, ctas * warps, r["regs"], f"{r['spill_st']} / {r['spill_ld']}", r["stack"],
                      f"{insns[h][0]:#x}-{insns[b][0]:#x} ({b - h + 1})", f"{head_macs:.0f}"])
    print("Issued SASS instructions per 16-token chunk step (one iteration of the chunk loop), sm_90a\n")
    print(table(counts, ["kernel", "warp", "total", *CLASSES]))
    print()
    print(table(facts, ["kernel", "threads", "BV", "warps/head", "registers", "spill st / ld (B)", "stack (B)",
                        "loop span (static instr)", "MAC/step/head"]))
    print("\nBranches decided by the fall-through rule (predicate unknown to the emulation) in the recorded step:")
    print("\n".join(f"- {k}: {'; '.join(sorted(v)) or 'none'}" for k, v in notes.items()))
    if args.ops:
        print("\nPer head and step, by opcode:\n" + "\n".join(by_op))
    return 0


if __name__ == "__main__":
    sys.exit(main())
