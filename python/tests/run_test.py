"""Runs one Python test of hpctrain.torch (registered in CMakeLists.txt, label python).

    run_test.py version_check
    run_test.py ranks N SCRIPT [ARGS...]   # hpctrain launch -np N -- python3 SCRIPT ARGS

Environment (set by CTest): PYTHONPATH=build/python, HPCTRAIN (the CLI), PYTHON_FOR_TESTS (python3).
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.environ.get("PYTHON_FOR_TESTS", "/usr/bin/python3")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def launch(n, script, args, timeout=240, extra=()):
    cmd = [os.environ["HPCTRAIN"], "launch", "-np", str(n), *extra, "--", PY,
           os.path.join(HERE, script), *args]
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    print(p.stdout)
    print("exit %d after %.1f s" % (p.returncode, time.monotonic() - t0))
    return p


def version_check():
    build_dir = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    ns = {}
    with open(os.path.join(build_dir, "hpctrain", "torch", "_build.py")) as f:
        exec(f.read(), ns)
    built = ns["TORCH_VERSION"]
    import torch
    if built != torch.__version__:
        fail("the module was built for torch %s, the test's python3 has %s" % (built, torch.__version__))
    # The torch it was built for: imports.
    ok = subprocess.run([PY, "-c", "import hpctrain.torch as h; print(h._C.TORCH_BUILD_VERSION)"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if ok.returncode != 0 or ok.stdout.strip() != built:
        fail("import with the right torch: exit %d, output %r" % (ok.returncode, ok.stdout))
    # Another torch (a stand-in package that reports another version) is refused
    # before the C++ module loads, naming both versions.
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "torch"))
        with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
            f.write('__version__ = "2.1.0+cpu"\n')
        env = dict(os.environ, PYTHONPATH=d + os.pathsep + os.environ["PYTHONPATH"])
        bad = subprocess.run([PY, "-c", "import hpctrain.torch"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(bad.stdout)
    if bad.returncode == 0:
        fail("import hpctrain.torch with torch 2.1.0+cpu succeeded")
    last = bad.stdout.strip().splitlines()[-1]
    if not last.startswith("ImportError") or built not in last or "2.1.0+cpu" not in last:
        fail("the error does not name both versions: %r" % last)
    print("version check ok: %s" % last)


def ranks(n, script, *args):
    p = launch(int(n), script, list(args))
    if p.returncode != 0:
        fail("%s on %s ranks exited %d" % (script, n, p.returncode))
    for k in range(int(n)):
        if "[%d] " % k not in p.stdout:
            fail("no output from rank %d" % k)


def main():
    what = sys.argv[1]
    if what == "version_check":
        version_check()
    elif what == "ranks":
        ranks(*sys.argv[2:])
    elif what == "srun":
        srun(*sys.argv[2:])
    elif what == "mpirun":
        mpirun(*sys.argv[2:])
    elif what == "killed_rank":
        killed_rank(*sys.argv[2:])
    else:
        fail("unknown test " + what)


def killed_rank(n, bound):
    """The last of n ranks dies; the others must raise within bound seconds."""
    p = launch(int(n), "kill_ranks.py", [bound],
               extra=["--grace", "90", "--env", "HPCT_TIMEOUT_S=%d" % int(float(bound))])
    for k in range(int(n) - 1):
        if ("rank %d raised" % k) not in p.stdout:
            fail("rank %d did not raise after rank %d died" % (k, int(n) - 1))
        if ("rank %d: took longer" % k) in p.stdout:
            fail("rank %d raised too late" % k)
    if p.returncode == 0:
        fail("the launcher reported success for a job whose rank was killed")


def mpirun(n, script, *args):
    """As ranks(), started by mpirun instead of hpctrain launch."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
           "-np", str(n), "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", PY, os.path.join(HERE, script), *args]
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    print(p.stdout)
    if p.returncode != 0:
        fail("%s under mpirun exited %d" % (script, p.returncode))
    for k in range(int(n)):
        if ("rank %d of %s" % (k, n)) not in p.stdout:
            fail("no result from rank %d" % k)


def srun(n, script, *args):
    """As ranks(), through `hpctrain launch --spawner srun` on a real
    single-node Slurm made for the test (scripts/slurm-local.sh)."""
    slurm = os.path.join(HERE, "..", "..", "scripts", "slurm-local.sh")
    d = tempfile.mkdtemp(prefix="hpct-py-slurm-")
    os.rmdir(d)
    up = subprocess.run(["bash", slurm, "up", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, timeout=60)
    try:
        if os.path.exists(os.path.join(d, "skip")):
            print("SKIP: " + open(os.path.join(d, "skip")).read().strip())
            return
        if up.returncode != 0:
            fail("slurm-local.sh up: " + up.stdout)
        os.environ["SLURM_CONF"] = os.path.join(d, "slurm.conf")
        p = launch(int(n), script, list(args), extra=["--spawner", "srun", "--spawner-arg=--overcommit", "--env", "PYTHONPATH"])
        if p.returncode != 0:
            fail("%s under srun exited %d" % (script, p.returncode))
        for k in range(int(n)):
            if ("rank %d of %s" % (k, n)) not in p.stdout:
                fail("no result from rank %d" % k)
    finally:
        subprocess.run(["bash", slurm, "down", d], timeout=60)


if __name__ == "__main__":
    main()
