#!/usr/bin/python3
# Copies what one host's package install made onto the hosts that share its
# base system (the same packages, release, users and groups before the
# install, and the same packages missing): run on the machine running setup,
# it streams one tar of every file the install created or changed (its
# status time after the time stamp the install left) from the installing
# host, over ssh, to each of the others at once, which unpack it and run
# ldconfig. Faster than installing on each host: unpacking a tar costs a
# fraction of dpkg's work (maintainer scripts, byte-compiling, triggers).
# Files that must differ per host are not copied (machine ids, ssh host
# keys, the host's name, glusterd's UUID, munge's key); files outside the
# root file system, runtime and log folders neither.
#
#   clone_install.py < JOBS.json    JOBS: [{"from": TARGET, "to": [TARGET...]}],
#                                   TARGET: {name, host, port, user, key, args}
# Prints {"hosts": {name: "" when copied, else what went wrong}, "bytes": {source: N},
# "seconds": S}; exits 0 (each host's outcome is in the answer).
"""Streams one host's fresh install to the hosts with the same base system."""

import fcntl
import json
import shlex
import subprocess
import sys
import threading
import time

STAMP = "./var/cache/hpctrain/install-stamp"
# Not walked: other file systems' mount points, runtime, logs, caches, setup's own files, homes.
PRUNE = ["./proc", "./sys", "./dev", "./run", "./tmp", "./var/tmp", "./var/cache/apt",
         "./var/lib/apt/lists", "./var/cache/hpctrain", "./root/.ansible", "./home", "./mnt", "./media"]
# Different on each host (or set by a later step for each host): never copied.
UNIQUE = ["./etc/machine-id", "./var/lib/dbus/machine-id", "./etc/ssh/ssh_host_*", "./etc/hostname",
          "./etc/hosts", "./etc/ssh/ssh_known_hosts", "./var/lib/glusterd/glusterd.info",
          "./var/lib/glusterd/peers/*", "./var/lib/glusterd/vols/*", "./etc/munge/munge.key",
          "./var/lib/systemd/random-seed", "./var/lib/nfs/state",
          "./etc/apt/sources.list.d/hpctrain-bundle.list"]
# Only the folders the packages made under these (a daemon may refuse to start without its
# own, and dpkg -V checks them), not the logs and state in them.
FOLDERS_ONLY = ["./var/log/*", "./var/lib/slurm/*"]
TAR_OPTS = "--numeric-owner --xattrs --xattrs-include='*'"
# Bounds: the whole copy, and reading the installing host's first bytes.
TIMEOUT_S = 600


def find_expr():
    prune = " -o ".join("-path %s" % shlex.quote(p) for p in PRUNE)
    unique = " -o ".join(["-path %s" % shlex.quote(p) for p in UNIQUE]
                         + ["-path %s ! -type d" % shlex.quote(p) for p in FOLDERS_ONLY])
    return "\\( %s \\) -prune -o \\( %s \\) -o -cnewer %s -print0" % (prune, unique, STAMP)


def pack_command():
    return ("set -o pipefail; cd / && test -f %s && find . -xdev -mindepth 1 %s | "
            "tar --null --no-recursion -T - -c -f - %s" % (STAMP, find_expr(), TAR_OPTS))


def unpack_command():
    return "tar -x -f - -C / -p %s && ldconfig" % TAR_OPTS


def ssh(target, command):
    argv = ["ssh", "-o", "BatchMode=yes", "-p", str(target.get("port") or 22),
            # AES-GCM first: the fastest cipher with AES instructions (this stream is the bulk of the copy).
            "-c", "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr"]
    if target.get("key"):
        argv += ["-i", target["key"]]
    argv += shlex.split(target.get("args") or "")
    argv += ["%s@%s" % (target.get("user") or "root", target["host"]), "bash -c %s" % shlex.quote(command)]
    return argv


def widen(pipe):
    """A 1 MB pipe buffer (Linux; 64 kB by default): each ssh keeps reading while the others are written."""
    try:
        fcntl.fcntl(pipe.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
    except (OSError, AttributeError):
        pass


def tail(data):
    lines = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return " / ".join(lines[-3:])


def copy(job, answer, sizes):
    source = job["from"]
    src = subprocess.Popen(ssh(source, pack_command()), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    sinks = {}
    for t in job["to"]:
        sinks[t["name"]] = subprocess.Popen(ssh(t, unpack_command()), stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        widen(sinks[t["name"]].stdin)
    widen(src.stdout)
    timed_out = []

    def stop():
        timed_out.append(True)
        for p in [src] + list(sinks.values()):
            p.kill()

    timer = threading.Timer(TIMEOUT_S, stop)
    timer.start()
    total = 0
    broken = {}
    try:
        while True:
            chunk = src.stdout.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            for name, p in sinks.items():
                if name in broken:
                    continue
                try:
                    p.stdin.write(chunk)
                except OSError as e:
                    broken[name] = str(e)
        for name, p in sinks.items():
            try:
                p.stdin.close()
            except OSError:
                pass
        src_err = src.stderr.read()
        src.wait()
        for name, p in sinks.items():
            err = p.stderr.read()
            rc = p.wait()
            if src.returncode != 0:
                answer[name] = "packing the install on %s failed (exit %d): %s" % (
                    source["name"], src.returncode, tail(src_err) or "no message")
            elif rc != 0 or name in broken:
                answer[name] = "unpacking %s's install here failed (exit %d): %s" % (
                    source["name"], rc, tail(err) or broken.get(name, "no message"))
            else:
                answer[name] = ""
    finally:
        timer.cancel()
        for p in [src] + list(sinks.values()):
            if p.poll() is None:
                p.kill()
                p.wait()
    sizes[source["name"]] = total
    if timed_out:
        for t in job["to"]:
            answer[t["name"]] = "copying %s's install did not end within %d s" % (source["name"], TIMEOUT_S)


def main():
    jobs = json.load(sys.stdin)
    start = time.monotonic()
    answer, sizes = {}, {}
    for job in jobs:
        for t in job["to"]:
            answer[t["name"]] = "not copied"
        try:
            copy(job, answer, sizes)
        except OSError as e:
            for t in job["to"]:
                answer[t["name"]] = "copying %s's install failed: %s" % (job["from"]["name"], e)
    print(json.dumps({"hosts": answer, "bytes": sizes, "seconds": round(time.monotonic() - start, 2)}))


main()
