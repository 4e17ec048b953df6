"""Builds and installs the hpctrain Python package (hpctrain.torch) into the
environment that runs pip, against that environment's torch, as Horovod's
package does:

    pip install --no-build-isolation ./python      (from a checkout of hpctrain)

The C++ engine and the module come from the project's CMake build (the
target hpct_py_torch, with -DHPCT_TORCH_PYTHON set to this python3), in a
build folder of its own under the checkout (HPCT_PIP_BUILD_DIR chooses
another). The Debian packages the build needs come from
scripts/install-deps.sh. docs/python.md has the details.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_version():
    try:
        import torch
    except ImportError as e:
        sys.exit("hpctrain: building hpctrain.torch needs torch in the environment pip installs "
                 "into, and %s cannot import it (%s). Install torch first, then run "
                 "`pip install --no-build-isolation ./python` (without --no-build-isolation pip "
                 "builds in a fresh environment that has no torch)." % (sys.executable, e))
    return torch.__version__


def same_torch_python(build):
    """The python3 an existing build folder was configured with, when it
    imports the very torch this one does (a venv made with
    --system-site-packages over it): reusing it keeps that build as it is."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            line = next(l for l in f if l.startswith("HPCT_TORCH_PYTHON:"))
    except (OSError, StopIteration):
        return None
    python = line.split("=", 1)[1].strip()
    import torch
    probe = "import torch; print(torch.__file__, torch.__version__)"
    try:
        theirs = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if theirs == "%s %s" % (torch.__file__, torch.__version__) else None


class CMakeBuild(build_ext):
    """Runs the project's CMake for the module and copies build/python/hpctrain."""

    def build_extension(self, ext):
        version = torch_version()
        if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
            sys.exit("hpctrain: %s is not in an hpctrain checkout (no CMakeLists.txt above it)" % HERE)
        tag = "py%d%d-torch%s" % (sys.version_info[0], sys.version_info[1], version.replace("+", "-"))
        build = os.environ.get("HPCT_PIP_BUILD_DIR") or os.path.join(ROOT, "build-pip", tag)
        python = same_torch_python(build) or sys.executable
        configure = ["cmake", "-S", ROOT, "-B", build, "-DHPCT_TORCH_PYTHON=" + python]
        if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
            configure += ["-DCMAKE_BUILD_TYPE=Release"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
        jobs = os.environ.get("HPCT_PIP_JOBS") or str(os.cpu_count() or 1)
        for cmd in (configure, ["cmake", "--build", build, "--target", "hpct_py_torch", "-j", jobs]):
            print("hpctrain: " + " ".join(cmd), flush=True)
            if subprocess.call(cmd) != 0:
                sys.exit("hpctrain: `%s` failed (above). The build needs the Debian packages of "
                         "scripts/install-deps.sh (cmake, OpenMPI, CLI11, ...)." % " ".join(cmd[:3]))
        built = os.path.join(build, "python", "hpctrain")
        dest = os.path.join(os.path.abspath(self.build_lib), "hpctrain")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(built, dest, ignore=shutil.ignore_patterns("__pycache__", "*.in"))


setup(
    name="hpctrain",
    version="0.1.0",
    description="hpctrain.torch: Horovod's API and a torch.distributed backend over hpctrain's engine",
    packages=["hpctrain", "hpctrain.torch"],
    package_dir={"": "."},
    python_requires=">=3.9",
    ext_modules=[Extension("hpctrain.torch._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
