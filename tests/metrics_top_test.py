#!/usr/bin/python3
"""`hpctrain top` on a running 2-host job, read off a real terminal (label netns).

    metrics_top_test.py HPCTRAIN NETNS_DIR

One rank on each of 2 namespace hosts (scripts/netns-cluster.sh, state in
NETNS_DIR), started by `hpctrain launch --metrics-port --metrics-sd`
(metrics_job.py). `hpctrain top --metrics-sd FILE` runs in a detached tmux
session (a server of its own, -L), and the test reads its screen with
`tmux capture-pane` as a user would see it:
- both ranks' rows (rank, host) are on the screen within 5 s of top's start,
  and the table is redrawn in place (one header on the screen);
- rank 1's process (the one listening on its endpoint on host 2) gets
  SIGSTOP: its row says UNREACHABLE within 10 s, and rank 0, which waits for
  it in every allreduce, says STALLED;
- after SIGCONT both rows are back to running.
Without a terminal, `top --count 2` prints plain key=value lines.
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_job import Job, wait_for  # noqa: E402

HPCTRAIN, NETNS_DIR = sys.argv[1], sys.argv[2]
SOCKET = "hpct-top-%d" % os.getpid()  # tmux -L: this test's own tmux server


def tmux(*args, **kw):
    return subprocess.run(["tmux", "-L", SOCKET] + list(args), capture_output=True, text=True, timeout=10, **kw)


def screen():
    return tmux("capture-pane", "-p", "-t", "top").stdout.rstrip() + "\n"


def row(text, rank, host):
    """The table row of `rank` on `host`, or None."""
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == str(rank) and f[1] == host:
            return line
    return None


def main():
    stopped = None
    with Job(HPCTRAIN, NETNS_DIR) as job:
        try:
            targets = job.start()
            hosts = [t.rsplit(":", 1)[0] for t in targets]
            print("job %s, targets %s" % (job.job_id, targets))
            # The endpoints answer once each rank has set itself up (connect, model).
            import urllib.request
            for t in targets:
                wait_for("the endpoint " + t, lambda t=t: urllib.request.urlopen(
                    "http://%s/metrics" % t, timeout=2).status == 200, 60)

            # No terminal: plain lines, no escape codes.
            plain = subprocess.run([HPCTRAIN, "top", "--metrics-sd", job.sd, "--count", "2"],
                                   capture_output=True, text=True, timeout=30)
            assert plain.returncode == 0, plain.stdout + plain.stderr
            assert "\x1b[" not in plain.stdout, plain.stdout
            for rank, host in enumerate(hosts):
                assert re.search(r"rank=%d host=%s state=\S+ samples_per_s=" % (rank, re.escape(host)),
                                 plain.stdout), plain.stdout
            print("plain lines:\n" + plain.stdout)

            # On a terminal: tmux, 200x40, top redrawing every second.
            t0 = time.monotonic()
            r = tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "40",
                     "%s top --metrics-sd %s" % (HPCTRAIN, job.sd))
            assert r.returncode == 0, "tmux new-session: " + r.stderr
            job.on_stop(lambda: tmux("kill-server"))
            text = wait_for("both ranks' rows on top's screen",
                            lambda: (lambda s: s if all(row(s, i, h) for i, h in enumerate(hosts)) else None)(screen()),
                            5, 0.2)
            print("both rows after %.1f s:\n%s" % (time.monotonic() - t0, text))
            # Training rows: each rank has a rate and a state of a running rank.
            text = wait_for("both ranks training on top's screen", lambda: (lambda s: s if all(
                re.search(r"\s(ok|slowest)\b", row(s, i, h) or "") and
                re.match(r"\S+\s+\S+\s+\d+\.\d", row(s, i, h) or "")
                for i, h in enumerate(hosts)) else None)(screen()), 60, 0.5)
            time.sleep(2.5)  # a few more rounds: still one header, redrawn in place
            text = screen()
            assert text.count("hpctrain top  job %s" % job.job_id) == 1, text
            assert text.count("SAMPLES/S") == 1, text
            print("training:\n" + text)

            pid = job.endpoint_pid(1)
            print("SIGSTOP rank 1 (pid %d on %s)" % (pid, hosts[1]))
            os.kill(pid, signal.SIGSTOP)
            stopped = pid
            t_stop = time.monotonic()
            text = wait_for("rank 1 marked UNREACHABLE", lambda: (lambda s: s if "UNREACHABLE" in (
                row(s, 1, hosts[1]) or "") else None)(screen()), 10, 0.25)
            print("rank 1 marked after %.1f s" % (time.monotonic() - t_stop))
            text = wait_for("rank 0 marked STALLED", lambda: (lambda s: s if "STALLED" in (
                row(s, 0, hosts[0]) or "") else None)(screen()), 10, 0.25)
            print("rank 0 marked STALLED after %.1f s:\n%s" % (time.monotonic() - t_stop, text))
            assert "events:" in text and "rank 1 (%s) UNREACHABLE" % hosts[1] in text, text

            os.kill(pid, signal.SIGCONT)
            stopped = None
            t_cont = time.monotonic()
            text = wait_for("both ranks running again after SIGCONT", lambda: (lambda s: s if all(
                re.search(r"\s(ok|slowest)\b", row(s, i, h) or "") for i, h in enumerate(hosts)) else None)(screen()),
                20, 0.5)
            print("both running again after %.1f s:\n%s" % (time.monotonic() - t_cont, text))
            print("top: PASS")
        finally:
            if stopped is not None:
                os.kill(stopped, signal.SIGCONT)


if __name__ == "__main__":
    main()
