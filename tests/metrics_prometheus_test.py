#!/usr/bin/python3
"""A real Prometheus scrapes a training job's ranks (label metrics).

    metrics_prometheus_test.py HPCTRAIN [NETNS_DIR]

Starts `hpctrain launch --metrics-port BASE --metrics-sd FILE -- hpctrain
train ...` (metrics_job.py): 2 ranks on loopback, or, given the state
directory of a 2-host cluster of scripts/netns-cluster.sh, one rank on each
namespace host. Then Debian's prometheus with a file_sd_configs job on that
file (scrape every second) on this machine (the root namespace reaches the
hosts over the bridge), and checks, each within 30 s, what an operator
would look at:
- Prometheus's API lists every rank's target as up, and
  `up{job="hpctrain"}` (the scrape configuration's job) finds every rank
  with the launch id in a label of its own (launch_id);
- it has a samples rate for every rank (rate(hpctrain_samples_total[5s]) > 0);
- promtool check metrics finds nothing to report on any rank's endpoint.
Every process it started is stopped by PID.
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_job import Job, wait_for  # noqa: E402

HPCTRAIN = sys.argv[1]
NETNS_DIR = sys.argv[2] if len(sys.argv) > 2 else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def main():
    with Job(HPCTRAIN, NETNS_DIR) as job:
        targets = job.start()
        print("job %s, targets %s" % (job.job_id, targets))
        prom_port = free_port()
        config = os.path.join(job.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: hpctrain\n    file_sd_configs:\n"
                    "      - files: ['%s']\n        refresh_interval: 1s\n" % job.sd)
        job.spawn(["prometheus", "--config.file=" + config, "--storage.tsdb.path=" + job.tmp + "/tsdb",
                   "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"], "prometheus.log")
        api = "http://127.0.0.1:%d/api/v1/" % prom_port
        t0 = time.monotonic()

        def all_up():
            active = get_json(api + "targets")["data"]["activeTargets"]
            up = sorted(t["labels"]["instance"] for t in active if t["health"] == "up")
            return up if up == sorted(targets) else None
        print("targets up: %s after %.1f s" % (wait_for("every rank's target up", all_up), time.monotonic() - t0))

        def query(q):
            return get_json(api + "query?query=" + urllib.parse.quote(q))["data"]["result"]

        # What a dashboard or an alert filters on: the scrape configuration's
        # job name finds every rank, and the launch id is a label of its own.
        up = {r["metric"]["instance"]: r["metric"] for r in query('up{job="hpctrain"}')}
        assert sorted(up) == sorted(targets), ("up{job=\"hpctrain\"}", up, targets)
        for instance, labels in up.items():
            assert labels.get("launch_id") == job.job_id, (instance, labels, job.job_id)
        print('up{job="hpctrain"}: %d series, launch_id %s' % (len(up), job.job_id))

        def rates():
            res = query('rate(hpctrain_samples_total{job="hpctrain"}[5s])')
            per_rank = {r["metric"]["rank"]: (float(r["value"][1]), r["metric"]) for r in res}
            ok = sorted(per_rank) == ["0", "1"] and min(v[0] for v in per_rank.values()) > 0
            return per_rank if ok else None
        per_rank = wait_for("a samples rate for every rank", rates)
        print("samples/s per rank, as Prometheus computes them: %s after %.1f s"
              % ({r: v[0] for r, v in per_rank.items()}, time.monotonic() - t0))
        print("a rank's series labels: %s" % sorted(per_rank["0"][1].items()))
        for rank, (_, labels) in per_rank.items():
            # The series carry the launch id, and across hosts the rank's own host.
            if NETNS_DIR:
                assert targets[int(rank)] == "%s:%d" % (labels["host"], job.base), (rank, labels, targets)
            assert labels.get("launch_id") == job.job_id, (rank, labels, job.job_id)
            assert "exported_job" not in labels, (rank, labels)

        for t in targets:
            text = urllib.request.urlopen("http://%s/metrics" % t, timeout=5).read()
            check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
            report = (check.stdout + check.stderr).decode().strip()
            assert check.returncode == 0 and report == "", "promtool on %s: exit %d: %s" % (t, check.returncode, report)
            for family in ("hpctrain_step_phase_seconds_bucket", "hpctrain_allreduce_bytes_total",
                           "hpctrain_process_cpu_seconds_total", "hpctrain_compression_ratio"):
                assert family.encode() in text, "%s has no %s" % (t, family)
            # What the rank holds, set by the training loop from its optimizer.
            for gauge in ("hpctrain_parameter_bytes", "hpctrain_optimizer_state_bytes"):
                values = [float(line.split()[-1]) for line in text.decode().splitlines()
                          if line.startswith(gauge + "{") or line.startswith(gauge + " ")]
                assert values and values[0] > 0, "%s: %s is %s, want > 0" % (t, gauge, values)
        print("promtool check metrics: nothing to report on %d endpoints" % len(targets))
        print("metrics: PASS")


if __name__ == "__main__":
    main()
