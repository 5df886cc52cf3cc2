"""The repository's text speaks of the product: no working-session or issue numbers (cite commits and dates), and
every relative markdown link in README.md and docs/ points at a file that exists."""
import re
from pathlib import Path

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
