"""Runs one Python test of hpctrain.torch (registered in CMakeLists.txt, label python).

    run_test.py version_check
    run_test.py ranks N SCRIPT [ARGS...]   # hpctrain launch -np N -- python3 SCRIPT ARGS
    run_test.py elastic                    # hpctrain.torch.elastic: a worker killed, a host joins
    run_test.py pip_install BUILD_DIR      # pip install ./python into a new venv; hpctrain launch and torchrun

Environment (set by CTest): PYTHONPATH=build/python, HPCTRAIN (the CLI), PYTHON_FOR_TESTS (python3).
"""
import os
import shutil
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
    elif what == "elastic":
        elastic()
    elif what == "pip_install":
        pip_install(sys.argv[2])
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


def wait_for(path, text, proc, bound):
    """The log's text once it contains text, bounded by bound seconds (None when not)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with open(path) as f:
            out = f.read()
        if text in out:
            return out
        if proc.poll() is not None:
            return None
        time.sleep(0.2)
    return None


def elastic():
    """hpctrain.torch.elastic under hpctrain launch --min-np 1 --max-np 2 on this
    machine (localhost, 127.0.0.1 and the host name play three hosts): worker 1
    is SIGKILLed at step 23; the survivor rolls back to its commit at step 20
    and trains alone; then discovery lists a new host, whose worker joins at a
    commit, gets the synced state and trains to the end with it."""
    import re
    import socket
    # Not under an elastic launch: one clear error line.
    code = ("import hpctrain.torch as hvd; hvd.init(); "
            "hvd.elastic.run(lambda s: 0)(hvd.elastic.TorchState(step_count=0))")
    p = subprocess.run([os.environ["HPCTRAIN"], "launch", "-np", "1", "--", PY, "-c", code],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    print(p.stdout)
    if p.returncode == 0 or "needs an elastic job: start the script with hpctrain launch --min-np" not in p.stdout:
        fail("hvd.elastic.run outside an elastic job: exit %d, no clear error" % p.returncode)
    d = tempfile.mkdtemp(prefix="hpct-py-elastic-")
    hosts = os.path.join(d, "hosts")

    def write_hosts(text):
        with open(hosts + ".tmp", "w") as f:
            f.write(text)
        os.rename(hosts + ".tmp", hosts)

    write_hosts("localhost:1\n127.0.0.1:1\n")
    log = os.path.join(d, "job.log")
    cmd = [os.environ["HPCTRAIN"], "launch", "--min-np", "1", "--max-np", "2",
           "--host-discovery-script", "cat " + hosts, "--discovery-interval", "0.5",
           "--blacklist-cooldown", "100", "--start-timeout", "120", "--", PY,
           os.path.join(HERE, "elastic_ranks.py"),
           "150", "1", "23", "2"]
    print("+ " + " ".join(cmd), flush=True)
    env = dict(os.environ, HPCT_ELASTIC_TIMEOUT_S="30")
    t0 = time.monotonic()
    with open(log, "w") as out:
        job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        text = wait_for(log, "size 2 -> 1", job, 150)
        if text is None:
            fail("no generation of size 1 after the kill:\n" + open(log).read())
        write_hosts("localhost:1\n127.0.0.1:1\n%s:1\n" % socket.gethostname())
        job.wait(timeout=150)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        fail("the job did not end within its bound:\n" + open(log).read())
    text = open(log).read()
    shutil.rmtree(d, ignore_errors=True)
    print(text)
    print("exit %d after %.1f s" % (job.returncode, time.monotonic() - t0))
    if job.returncode != 0:
        fail("the elastic job exited %d" % job.returncode)
    for want in ["worker 1 kills itself at step 23",
                 "worker 1 (rank 1) on 127.0.0.1 is lost",
                 "(scale-up): size 1 -> 2, rolled back 0 steps"]:
        if want not in text:
            fail("missing from the output: " + want)
    # The survivor rolled back to its last commit (step 20) within 10 s.
    m = re.search(r"\(failure\): size 2 -> 1, rolled back ([0-9]+) steps to step ([0-9]+), ([0-9.]+) s", text)
    if not m or m.group(2) != "20" or not 1 <= int(m.group(1)) <= 5 or float(m.group(3)) >= 10:
        fail("no rollback to step 20 of at most 5 steps within 10 s: %s" % (m.group(0) if m else None))
    # Every world's sync left identical state on every rank; the joiner got it.
    if "synced state identical on every rank: NO" in text:
        fail("a world's sync left different state on its ranks")
    joined = re.search(r"worker 2 world 1: rank 1 of 2 at step ([0-9]+), synced state identical "
                       r"on every rank: yes", text)
    if not joined or int(joined.group(1)) <= 20:
        fail("the new worker did not join with the synced state at a later commit")
    # Both finish at the same step (at least 150), with the step counted once
    # per optimizer step across the rollback, in a world of 2, identical.
    done = re.findall(r"worker ([0-9]+) done: step ([0-9]+), batches_done ([0-9]+), commits in history "
                      r"([0-9]+), resets (\[.*?\]), size ([0-9]+), parameters identical on every rank: (\w+)",
                      text)
    if sorted(w for w, *_ in done) != ["0", "2"]:
        fail("expected workers 0 and 2 to finish, got %s" % [w for w, *_ in done])
    steps = {s for _, s, *_ in done}
    for w, step, batches, commits, resets, size, same in done:
        if len(steps) != 1 or int(step) < 150 or batches != step or size != "2" or same != "yes":
            fail("worker %s ended wrong: step %s, batches %s, size %s, identical %s"
                 % (w, step, batches, size, same))
        if int(commits) != int(step) // 5:
            fail("worker %s: %s commits kept for %s steps (a rolled-back commit survived)" % (w, commits, step))
    resets0 = [r for w, _, _, _, r, *_ in done if w == "0"][0]
    if resets0 != "[1, 2]":
        fail("worker 0's reset callbacks ran with sizes %s, expected [1, 2]" % resets0)


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



def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pip_install(build_dir):
    """`pip install --no-build-isolation ./python` into a new virtual environment
    that sees the torch hpctrain is built against (PYTHON_FOR_TESTS's
    site-packages through a .pth file), reusing BUILD_DIR; then, with no
    PYTHONPATH, the Horovod example on 2 ranks under hpctrain launch and the
    DDP example with init_process_group("hpctrain") on 2 ranks under torchrun
    (torch.distributed.run) from that environment."""
    src = os.path.dirname(os.path.dirname(HERE))
    examples = os.path.join(src, "examples", "python")
    with tempfile.TemporaryDirectory() as d:
        venv = os.path.join(d, "venv")
        py = os.path.join(venv, "bin", "python3")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["HPCT_PIP_BUILD_DIR"] = build_dir

        def run(cmd, timeout, cwd=d):
            print("+ " + " ".join(cmd), flush=True)
            t0 = time.monotonic()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout, env=env, cwd=cwd)
            print(p.stdout[-6000:])
            print("exit %d after %.1f s" % (p.returncode, time.monotonic() - t0), flush=True)
            return p

        if run([PY, "-m", "venv", venv], 120).returncode != 0:
            fail("python3 -m venv failed")
        # The torch of PYTHON_FOR_TESTS's environment, seen through a .pth file
        # (--system-site-packages would show the base interpreter's instead).
        theirs = subprocess.run([PY, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
        ours = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(ours, "torch-env.pth"), "w") as f:
            f.write(theirs + "\n")
        p = run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-input",
                 "--disable-pip-version-check", os.path.join(src, "python")], 900)
        if p.returncode != 0:
            fail("pip install --no-build-isolation ./python exited %d" % p.returncode)
        p = run([py, "-c", "import hpctrain.torch as h, torch; print(h.__file__); print(h._C.TORCH_BUILD_VERSION)"], 120)
        lines = p.stdout.split()
        if p.returncode != 0 or not lines or not lines[0].startswith(venv + "/"):
            fail("hpctrain.torch does not import from the new environment: %r" % p.stdout)
        p = run([os.environ["HPCTRAIN"], "launch", "-np", "2", "--", py,
                 os.path.join(examples, "horovod_fashion_mnist.py"), "--steps", "10"], 300)
        if p.returncode != 0 or p.stdout.count("identical on all 2 ranks: True") != 2:
            fail("the Horovod example under hpctrain launch: exit %d, parameters not identical on both ranks"
                 % p.returncode)
        env["OMP_NUM_THREADS"] = "1"
        p = run([py, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                 "--master-port", str(free_port()), os.path.join(examples, "ddp_fashion_mnist.py"),
                 "--steps", "10"], 300)
        if p.returncode != 0 or p.stdout.count("identical on all 2 ranks: True") != 2:
            fail("the DDP example under torchrun: exit %d, parameters not identical on both ranks"
                 % p.returncode)
    print("pip install, hpctrain launch and torchrun: ok")

if __name__ == "__main__":
    main()
