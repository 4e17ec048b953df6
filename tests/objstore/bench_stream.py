#!/usr/bin/env python3
"""`hpctrain bench data --source` against nginx on loopback (HTTP and HTTPS
with a CA made here), on Fashion-MNIST's training split packed into shards
of at most --shard-size, and the same through the fault proxy throttled to
--rate bytes/s (time to first sample of a throttled shard). Prints the
benchmark's JSON lines.

  python3 tests/objstore/bench_stream.py HPCTRAIN [--shard-size 100M] [--rounds 5]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hpctrain")
    ap.add_argument("--shard-size", default="100M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=20 << 20)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="hpct-bench-stream-")
    srv = servers.Servers(d, d + "/www")
    try:
        subprocess.run([a.hpctrain, "data", "pack", "--from", "fashion-mnist", "--split", "train", "-q",
                        "--max-count", "1000000", "--max-size", a.shard_size, "-o", d + "/www/s/train-%06d.tar"],
                       check=True, stdout=subprocess.DEVNULL)
        n = len([f for f in os.listdir(d + "/www/s") if f.endswith(".tar")])
        pattern = "/s/train-{000000..%06d}.tar" % (n - 1)
        srv.start_nginx()
        for base in ("http://127.0.0.1:%d" % srv.http_port, "https://127.0.0.1:%d" % srv.https_port):
            subprocess.run([a.hpctrain, "bench", "data", "--source", base + pattern, "--rounds", str(a.rounds),
                            "--ca-file", srv.ca_file], check=True)
        port, _ = srv.start_proxy(srv.http_port, "--rate", str(a.rate))
        subprocess.run([a.hpctrain, "bench", "data", "--source", "http://127.0.0.1:%d/s/train-000000.tar" % port,
                        "--rounds", "1"], check=True)
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
