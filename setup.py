"""setuptools hook: a wheel carries cuda_fast's compiled libraries (`cuda_fast.build.package` into cuda_fast/lib/, for
the targets of $TRITON_KDA_CUDA_ARCHS: all by default, "none" for none) and is then tagged for this platform; an
editable install builds none (the library is built on first use, as in development)."""
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_fast import build  # noqa: E402  (imports no torch: cuda_fast/__init__.py is lazy)


class BuildPy(build_py):
    def run(self):
        super().run()
        targets = build.wheel_targets()
        if targets and not getattr(self, "editable_mode", False):
            manifest = build.package(Path(self.build_lib) / "cuda_fast" / "lib", targets)
            print(f"cuda_fast: built {', '.join(manifest['files'].values())} with {manifest['nvcc'].splitlines()[-1]}")


class BdistWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = not build.wheel_targets()  # shared libraries: a platform wheel

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if not self.root_is_pure else (python, abi, plat)  # any CPython: ctypes, no API


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
