"""A running training job with metrics endpoints, for the metrics tests.

Shared by metrics_prometheus_test.py and metrics_top_test.py: packs a few
Fashion-MNIST shards, starts `hpctrain launch --metrics-port BASE
--metrics-sd FILE -- hpctrain train ...` either with 2 ranks on this
machine (loopback) or with one rank on each of 2 network-namespace hosts
(scripts/netns-cluster.sh; the root namespace reaches them over the
bridge), and stops everything it started by PID.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


def wait_for(what, check, timeout=30.0, every=0.5):
    """Polls check() every `every` s until it returns a true value; fails after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(every)
    raise AssertionError("%s: not within %.0f s (last: %r)" % (what, timeout, last))


def read_env_file(path):
    env = {}
    for line in open(path):
        if "=" in line:
            k, v = line.strip().split("=", 1)
            env[k] = v.strip('"')
    return env


def port_free(port, address="127.0.0.1"):
    with socket.socket() as s:
        try:
            s.bind((address, port))
            return True
        except OSError:
            return False


class Job:
    """hpctrain launch ... -- hpctrain train, with endpoints; a context manager."""

    def __init__(self, hpctrain, netns_dir=None):
        self.hpctrain = hpctrain
        self.netns = None
        if netns_dir:
            skip = os.path.join(netns_dir, "skip")
            if os.path.exists(skip):
                print("SKIPPED: network namespaces unavailable: " + open(skip).read().strip())
                raise SystemExit(SKIP)
            self.netns = read_env_file(os.path.join(netns_dir, "env"))
        self.tmp = tempfile.mkdtemp(prefix="hpct-metrics-")
        self.procs = []
        self.cleanups = []
        self.sd = os.path.join(self.tmp, "targets.json")
        self.np = 2             # ranks of a job on this machine
        self.launch_extra = []  # more launch options
        self.train_extra = []   # more train options
        self.with_head = False  # across namespace hosts: one more rank on this machine (the head)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def log(self, name):
        return open(os.path.join(self.tmp, name), "w")

    def start(self, model="cnn"):
        """Starts the job; returns its targets (host:port, rank order) once the discovery file lists them."""
        subprocess.run([self.hpctrain, "data", "pack", "--from", "fashion-mnist", "--split", "test", "-q",
                        "--max-count", "2000", "-o", self.tmp + "/fm-%06d.tar"], check=True, timeout=120)
        if self.netns:
            hosts = self.netns["NETNS_HOSTS"].split()[:2]
            # Each namespace host has its own ports: any base is free there.
            self.base = 9400
            if self.with_head:  # the head's ports are this machine's
                hosts.append(self.netns["NETNS_HEAD"])
                self.base = next(p for p in range(20000 + os.getpid() % 5000, 32000, 4)
                                 if port_free(p, self.netns["NETNS_HEAD"]))
            where = ["-H", ",".join("%s:1" % h for h in hosts), "-i", self.netns["NETNS_KEY"],
                     "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "UserKnownHostsFile=/dev/null"]
            expected = ["%s:%d" % (h, self.base) for h in hosts]
        else:
            # Below the kernel's ephemeral range (32768 and up here), so no port
            # the job's own connections take on the fly can land on a rank's.
            self.base = next(p for p in range(20000 + os.getpid() % 5000, 32000, 4)
                             if all(port_free(p + i) for i in range(self.np)))
            where = ["-np", str(self.np)]
            expected = ["127.0.0.1:%d" % (self.base + i) for i in range(self.np)]
        job = subprocess.Popen(
            [self.hpctrain, "launch"] + where + ["--metrics-port", str(self.base), "--metrics-sd", self.sd] +
            self.launch_extra +
            ["--", self.hpctrain, "train", "--model", model, "--data", self.tmp + "/fm-{000000..000003}.tar",
             "--epochs", "50", "--max-steps", "100000", "--batch", "16", "--threads", "1",
             "--log-every", "50", "--progress", "lines"] + self.train_extra,
            stdout=self.log("job.log"), stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(job)
        wait_for("the launcher writes " + self.sd, lambda: os.path.exists(self.sd), 30)
        sd = json.load(open(self.sd))
        targets = sd[0]["targets"]
        assert targets == expected, "discovery file lists %s, expected %s" % (targets, expected)
        self.job_id = sd[0]["labels"]["launch_id"]
        self.targets = targets
        return targets

    def spawn(self, argv, log_name, **kw):
        """Starts a helper process (Prometheus, tmux) in its own session; stopped with the job."""
        p = subprocess.Popen(argv, stdout=self.log(log_name), stderr=subprocess.STDOUT, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def endpoint_pid(self, index):
        """The PID of the process serving targets[index]: the rank listening on that port on its host."""
        host, port = self.targets[index].rsplit(":", 1)
        cmd = ["ss", "-Hltnp", "sport = :%s" % port]
        if self.netns and host in self.netns["NETNS_HOSTS"].split():
            i = self.netns["NETNS_HOSTS"].split().index(host) + 1
            cmd = ["ip", "netns", "exec", "hpct-%s-h%d" % (self.netns["NETNS_NAME"], i)] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        pids = {int(p) for p in re.findall(r"pid=(\d+)", out)}
        assert len(pids) == 1, "one process should listen on %s: %r" % (self.targets[index], out)
        pid = pids.pop()
        comm = open("/proc/%d/comm" % pid).read().strip()
        assert comm.startswith("hpctrain"), "%s is served by %d (%s), not a rank" % (self.targets[index], pid, comm)
        return pid

    def on_stop(self, fn):
        """fn() runs first when the job stops (e.g. a tmux server of the test's own)."""
        self.cleanups.append(fn)

    def stop_processes(self):
        """Stops every process started (cleanups first), keeping the files."""
        for fn in self.cleanups:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                print("cleanup: %r" % e)
        self.cleanups = []
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=15)
                except ProcessLookupError:
                    pass
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()

    def stop(self):
        self.stop_processes()
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".log"):
                print("---- %s (last lines)" % name)
                print("".join(open(os.path.join(self.tmp, name), errors="replace").readlines()[-15:]))
        shutil.rmtree(self.tmp, ignore_errors=True)
