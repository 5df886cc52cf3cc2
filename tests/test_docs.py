"""The repository's text speaks of the product: no working-session or issue numbers (cite commits and dates), and
every relative markdown link in README.md and docs/ points at a file that exists; README.md's quickstart runs."""
import re
from pathlib import Path

import torch

from reference.kda import kda_recurrent
from tests.utils import assert_close

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("README.md", "docs", "triton_kda", "cuda_fast", "benchmarks", "reference", "tests")
FORBIDDEN = re.compile(
    r"\bsession[ -]?\d|\b(?:this|next|last|previous) session\b|\bissue[ -]?#?\d|runs/session", re.IGNORECASE
)
LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _files(roots, suffixes):
    for name in roots:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in candidates:
            parts = f.relative_to(ROOT).parts
            if f.is_file() and f.suffix in suffixes and not any(p.startswith(".") or p == "__pycache__" for p in parts):
                yield f


def test_no_session_or_issue_numbers():
    this = Path(__file__).resolve()
    hits = [
        f"{f.relative_to(ROOT)}:{n}: {m.group(0)!r}"
        for f in _files(SCANNED, {".md", ".py"})
        if f.resolve() != this
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        for m in FORBIDDEN.finditer(line)
    ]
    assert len(list(_files(SCANNED, {".md", ".py"}))) > 50, "the scan found too few files: wrong root?"
    assert not hits, "cite a commit or a date instead:\n" + "\n".join(hits)


def test_relative_markdown_links_resolve():
    broken, checked = [], 0
    for f in _files(("README.md", "docs"), {".md"}):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for m in LINK.finditer(line):
                target = m.group(1).split("#", 1)[0]
                if not target or EXTERNAL.match(target):
                    continue
                checked += 1
                if not (f.parent / target).exists():
                    broken.append(f"{f.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert checked > 20, f"only {checked} relative links found: the link pattern or the root is wrong"
    assert not broken, "broken relative links:\n" + "\n".join(broken)


_QUICKSTART_GPU = ('dev, dtype = "cuda", torch.bfloat16', "B, T, H, K = 1, 4096, 16, 128")
_QUICKSTART_CPU = ('dev, dtype = "cpu", torch.float32', "B, T, H, K = 1, 40, 2, 16")


def _quickstart() -> str:
    """README.md's quickstart code block, its GPU device/dtype and shape lines swapped for interpreter-sized ones."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^## Quickstart\n.*?^```python\n(.*?)^```", readme, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "README.md needs one ```python block under '## Quickstart'"
    code = blocks[0]
    for gpu, cpu in zip(_QUICKSTART_GPU, _QUICKSTART_CPU, strict=True):
        assert code.count(gpu) == 1, f"the quickstart no longer has the line {gpu!r}: update this test"
        code = code.replace(gpu, cpu)
    return code


def test_readme_quickstart_runs():
    ns: dict = {}
    exec(compile(_quickstart(), "README.md:quickstart", "exec"), ns)
    q, k, v, g, beta, kimi, cu = (ns[n] for n in ("q", "k", "v", "g", "beta", "kimi", "cu"))
    for name in ("q", "k", "v", "g", "beta"):
        grad = ns[name].grad
        assert grad is not None and grad.shape == ns[name].shape and torch.isfinite(grad).all(), name
    assert grad.abs().sum() > 0
    flags = {n: x.double() if torch.is_tensor(x) else x for n, x in kimi.items()}
    ref_o, ref_ht = kda_recurrent(*(x.detach().double() for x in (q, k, v, g, beta)), output_final_state=True,
                                  cu_seqlens=cu, **flags)
    assert_close("o (varlen)", ns["o"], ref_o, 1e-5)
    assert_close("ht (varlen)", ns["ht"], ref_ht, 1e-5)
