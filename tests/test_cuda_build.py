"""cuda_fast/build.py's packaged libraries, on any machine (a fake nvcc): the wheel's targets, the library and manifest
`package` writes, which library `load_library` takes (packaged where the manifest matches the sources, else built, else
why neither), and setup.py's wheel hook writing them into the build tree."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_fast import build, library
from cuda_fast.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
FAKE_NVCC = """#!{python}
import sys
if "--version" in sys.argv:
    print("fake nvcc\\nCuda compilation tools, release 13.0, V13.0.0")
else:
    open(sys.argv[sys.argv.index("-o") + 1], "w").write("library " + " ".join(sys.argv[1:]))
"""


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """A folder holding an executable `nvcc` that writes its command line into its output file; nvcc_path finds it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    nvcc = folder / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    return folder


@pytest.mark.parametrize("text, targets", [(None, TARGETS), ("all", TARGETS), ("none", ()), ("90a", ("90a",)),
                                           (" 100a, 90a ", ("100a", "90a"))])
def test_wheel_targets(text, targets, monkeypatch):
    if text is None:
        monkeypatch.delenv(build.ARCHS_ENV, raising=False)
    else:
        monkeypatch.setenv(build.ARCHS_ENV, text)
    assert build.wheel_targets() == targets


def test_wheel_targets_rejects_unknown(monkeypatch):
    monkeypatch.setenv(build.ARCHS_ENV, "90a,89")
    with pytest.raises(ValueError, match=r"TRITON_KDA_CUDA_ARCHS: unknown targets \['89'\]"):
        build.wheel_targets()


def test_package_writes_each_target_and_its_manifest(fake_nvcc, tmp_path):
    out = tmp_path / "lib"
    manifest = build.package(out, TARGETS)
    assert json.loads((out / build.MANIFEST).read_text()) == manifest
    assert manifest["targets"] == list(TARGETS) and manifest["source_hash"] == build.source_hash()
    assert manifest["nvcc"].endswith("V13.0.0") and manifest["format"] == build.MANIFEST_FORMAT
    for target in TARGETS:
        text = (out / manifest["files"][target]).read_text()
        assert f"arch=compute_{target},code=sm_{target}" in text and "-shared" in text and "kda_intra_bwd.cu" in text
        assert build.packaged(target, out) == (out / f"kda_cuda_sm{target}.so", "")


def test_packaged_serves_only_the_sources_it_was_built_from(fake_nvcc, tmp_path, monkeypatch):
    out = tmp_path / "lib"
    assert build.packaged("90a", out) == (None, "no packaged library (an editable or source install)")
    build.package(out, ("90a",))
    assert build.packaged("100a", out) == (None, "the packaged libraries are for ['90a'], not 100a")
    monkeypatch.setattr(build, "source_hash", lambda: "0" * 64)
    assert build.packaged("90a", out)[1] == ("the packaged library was built from other sources than cuda_fast/csrc/ "
                                             "holds")


def test_source_hash_follows_every_source_and_header():
    names = (*build.SOURCES, *build.HEADERS)
    assert len(names) == 3 and all((build.CSRC / n).is_file() for n in names)
    assert len(build.source_hash()) == 64


def test_load_library_prefers_the_packaged_one_then_builds_then_says_why_neither(monkeypatch, tmp_path):
    monkeypatch.setattr(library, "Library", lambda path, origin: (path, origin))
    library.load_library.cache_clear()
    monkeypatch.setattr(build, "packaged", lambda target: (tmp_path / "p.so", ""))
    monkeypatch.setattr(build, "library", lambda target: pytest.fail("built although a packaged library serves"))
    assert library.load_library("90a") == (tmp_path / "p.so", f"packaged ({tmp_path / 'p.so'})")
    library.load_library.cache_clear()
    monkeypatch.setattr(build, "packaged", lambda target: (None, "no packaged library (an editable or source install)"))
    monkeypatch.setattr(build, "library", lambda target: tmp_path / "b.so")
    assert library.load_library("90a") == (tmp_path / "b.so", f"built ({tmp_path / 'b.so'}; no packaged library "
                                                              "(an editable or source install))")
    library.load_library.cache_clear()

    def no_nvcc(target):
        raise build.BuildError("nvcc not found")

    monkeypatch.setattr(build, "library", no_nvcc)
    with pytest.raises(build.BuildError, match=r"no packaged library \(an editable or source install\); nvcc not "):
        library.load_library("90a")
    library.load_library.cache_clear()


def test_setup_py_puts_the_libraries_and_manifest_into_the_build_tree(fake_nvcc, tmp_path):
    """What a wheel carries: setup.py's build_py, run as the build backend runs it, writes cuda_fast/lib/ with a
    manifest whose targets are $TRITON_KDA_CUDA_ARCHS and whose source hash is the sources'."""
    env = {**os.environ, build.ARCHS_ENV: "90a", "CUDA_HOME": str(fake_nvcc.parent)}
    out = tmp_path / "build_lib"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((out / "cuda_fast" / "lib" / build.MANIFEST).read_text())
    assert manifest["targets"] == ["90a"] and manifest["source_hash"] == build.source_hash()
    assert (out / "cuda_fast" / "lib" / "kda_cuda_sm90a.so").is_file() and (out / "cuda_fast" / "csrc").is_dir()
