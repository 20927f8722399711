"""pip install ./python: builds libflashgpt_attention.so with the repository's Makefile (`make lib`: this machine's
GPU arch, or sm_80 and sm_90a without one) and installs it inside the flashgpt package, beside the flashgpt_attention
module. Nothing is compiled against PyTorch: the calls go through ctypes. Needs the CUDA Toolkit (nvcc) and the
repository around this directory (pip builds in place)."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
LIB_NAME = "libflashgpt_attention.so"


class BuildPyWithLibrary(build_py):
    """the Python files, then `make lib` in the repository and its library into the package"""

    def run(self):
        super().run()
        subprocess.check_call(["make", "-C", REPO_ROOT, f"-j{os.cpu_count() or 2}", "lib"])
        package_dir = os.path.join(self.build_lib, "flashgpt")
        os.makedirs(package_dir, exist_ok=True)
        shutil.copy2(os.path.join(REPO_ROOT, LIB_NAME), os.path.join(package_dir, LIB_NAME))


setup(cmdclass={"build_py": BuildPyWithLibrary})
