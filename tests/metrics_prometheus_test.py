#!/usr/bin/python3
"""A real Prometheus scrapes a training job's ranks (label metrics).

    metrics_prometheus_test.py HPCTRAIN

Packs a few Fashion-MNIST shards, starts `hpctrain launch -np 2
--metrics-port BASE --metrics-sd FILE -- hpctrain train ...` and Debian's
prometheus with a file_sd_configs job on that file (scrape every second),
then checks, each within 30 s, what an operator would look at:
- Prometheus's API lists every rank's target as up;
- it has a samples rate for every rank (rate(hpctrain_samples_total[5s]) > 0);
- promtool check metrics finds nothing to report on any rank's endpoint.
Everything runs on loopback; every process it started is stopped by PID.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HPCTRAIN = sys.argv[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout=30.0):
    """Polls check() every 0.5 s until it returns a true value; fails after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError("%s: not within %.0f s (last: %r)" % (what, timeout, last))


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def main():
    tmp = tempfile.mkdtemp(prefix="hpct-metrics-")
    procs = []
    try:
        subprocess.run([HPCTRAIN, "data", "pack", "--from", "fashion-mnist", "--split", "test", "-q",
                        "--max-count", "2000", "-o", tmp + "/fm-%06d.tar"], check=True, timeout=120)
        # Below the kernel's ephemeral range (32768 and up here), so no port
        # the job's own connections take on the fly can land on a rank's.
        base = next(p for p in range(20000 + os.getpid() % 5000, 32000, 2)
                    if _port_free(p) and _port_free(p + 1))
        sd = os.path.join(tmp, "targets.json")
        log = open(os.path.join(tmp, "job.log"), "w")
        job = subprocess.Popen(
            [HPCTRAIN, "launch", "-np", "2", "--metrics-port", str(base), "--metrics-sd", sd, "--",
             HPCTRAIN, "train", "--model", "cnn", "--data", tmp + "/fm-{000000..000003}.tar",
             "--epochs", "50", "--max-steps", "100000", "--batch", "16", "--threads", "1",
             "--log-every", "50", "--progress", "lines"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(job)
        wait_for("the launcher writes " + sd, lambda: os.path.exists(sd), 30)
        targets = json.load(open(sd))[0]["targets"]
        assert targets == ["127.0.0.1:%d" % base, "127.0.0.1:%d" % (base + 1)], targets

        prom_port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: hpctrain\n    file_sd_configs:\n"
                    "      - files: ['%s']\n        refresh_interval: 1s\n" % sd)
        prom = subprocess.Popen(
            ["prometheus", "--config.file=" + config, "--storage.tsdb.path=" + tmp + "/tsdb",
             "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"],
            stdout=open(os.path.join(tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        procs.append(prom)
        api = "http://127.0.0.1:%d/api/v1/" % prom_port

        t0 = time.monotonic()

        def all_up():
            active = get_json(api + "targets")["data"]["activeTargets"]
            up = sorted(t["labels"]["instance"] for t in active if t["health"] == "up")
            return up if up == sorted(targets) else None
        print("targets up: %s after %.1f s" % (wait_for("every rank's target up", all_up), time.monotonic() - t0))

        def rates():
            q = urllib.parse.quote("rate(hpctrain_samples_total[5s])")
            res = get_json(api + "query?query=" + q)["data"]["result"]
            per_rank = {r["metric"]["rank"]: float(r["value"][1]) for r in res}
            return per_rank if sorted(per_rank) == ["0", "1"] and min(per_rank.values()) > 0 else None
        per_rank = wait_for("a samples rate for every rank", rates)
        print("samples/s per rank, as Prometheus computes them: %s after %.1f s" % (per_rank, time.monotonic() - t0))

        for t in targets:
            text = urllib.request.urlopen("http://%s/metrics" % t, timeout=5).read()
            check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
            report = (check.stdout + check.stderr).decode().strip()
            assert check.returncode == 0 and report == "", "promtool on %s: exit %d: %s" % (t, check.returncode, report)
            for family in ("hpctrain_step_phase_seconds_bucket", "hpctrain_allreduce_bytes_total",
                           "hpctrain_process_cpu_seconds_total", "hpctrain_compression_ratio"):
                assert family.encode() in text, "%s has no %s" % (t, family)
        print("promtool check metrics: nothing to report on %d endpoints" % len(targets))
        print("metrics: PASS")
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for name in ("job.log", "prometheus.log"):
            path = os.path.join(tmp, name)
            if os.path.exists(path):
                print("---- %s (last lines)" % name)
                print("".join(open(path).readlines()[-15:]))
        shutil.rmtree(tmp, ignore_errors=True)


def _port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


if __name__ == "__main__":
    main()
