#!/usr/bin/python3
# One host's side of the scratch volume, in one round trip: glusterd running
# (started when it is not, bounded), the brick folder, and a brick emptied by
# a restart (RAM) given back its volume id so the volume takes it again.
# Prints one JSON object: what changed, what was lost, and whether the
# brick's process runs (and whether the volume has it). With --check nothing is changed; what would be is
# reported the same way.
#
#   gluster_brick.py VOLUME ADDRESS BRICK_DIR START_TIMEOUT_S [--check]
"""Runs glusterd and keeps this host's brick folder for the scratch volume."""

import glob
import json
import os
import re
import socket
import subprocess
import sys
import time

PIDFILE = "/run/glusterd.pid"
LOG = "/var/log/glusterfs/glusterd.log"


def alive(pidfile):
    try:
        with open(pidfile, encoding="ascii") as f:
            pid = int(f.read().strip() or 0)
        if pid <= 0:
            return False
        os.kill(pid, 0)
        # The pid namespace may be shared with other hosts: it must be glusterd in our root.
        with open("/proc/%d/comm" % pid, encoding="ascii") as f:
            return f.read().strip().startswith("gluster")
    except (OSError, ValueError):
        return False


def listening(port, timeout=1.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout):
            return True
    except OSError:
        return False


def log_size():
    try:
        return os.path.getsize(LOG)
    except OSError:
        return 0


def log_errors(since, n=2):
    """The first error messages glusterd wrote after offset `since` (why it stopped)."""
    try:
        with open(LOG, encoding="utf-8", errors="replace") as f:
            f.seek(since)
            lines = f.read().splitlines()
    except OSError:
        return "no log at " + LOG
    found = []
    for line in lines:
        # "[time] E [where] 0-management: message"; the ulimit complaint is there on every start.
        if ("] E [" in line or "] C [" in line) and "ulimit" not in line:
            m = re.search(r"\] \d+-[\w.-]+: (.*)$", line)
            text = " ".join((m.group(1) if m else line).split())
            if text not in found:
                found.append(text)
    return " | ".join(found[:n]) or "no error in " + LOG


def volume_id(volume):
    """The volume's id as this host's glusterd knows it ("" when it does not)."""
    try:
        with open("/var/lib/glusterd/vols/%s/info" % volume, encoding="ascii") as f:
            for line in f:
                if line.startswith("volume-id="):
                    return line.strip().split("=", 1)[1]
    except OSError:
        pass
    return ""


def brick_in_volume(volume, addr, brick):
    """Whether the volume (as this host's glusterd knows it) has this host's brick."""
    return os.path.exists("/var/lib/glusterd/vols/%s/bricks/%s:%s" % (volume, addr, brick.replace("/", "-")))


def brick_online(volume, brick):
    """Whether this host runs the brick's process (glusterd's pid file for it)."""
    for pidfile in glob.glob("/var/run/gluster/vols/%s/*.pid" % volume):
        if pidfile.endswith(brick.replace("/", "-") + ".pid") and alive(pidfile):
            return True
    return False


def main():
    volume, addr, brick, start_timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    check = "--check" in sys.argv[5:]
    out = {"changed": [], "lost": "", "glusterd": True, "error": "", "brick_online": False, "in_volume": False}
    if not (alive(PIDFILE) and listening(24007)):
        if check:
            out["changed"].append("start glusterd")
            out["glusterd"] = False
        else:
            since = log_size()
            subprocess.run(["glusterd", "-p", PIDFILE, "--log-file=" + LOG], capture_output=True, timeout=30,
                           check=False)
            deadline = time.monotonic() + start_timeout
            while time.monotonic() < deadline and not (alive(PIDFILE) and listening(24007)):
                time.sleep(0.3)
            if alive(PIDFILE) and listening(24007):
                out["changed"].append("started glusterd")
            else:
                out["glusterd"] = False
                out["error"] = "glusterd did not start within %g s (%s)" % (start_timeout, log_errors(since))
                print(json.dumps(out))
                return
    if not os.path.isdir(brick):
        out["changed"].append("make the brick folder " + brick)
        if not check:
            os.makedirs(brick, mode=0o755, exist_ok=True)
    vid = volume_id(volume)
    if vid and os.path.isdir(brick) and brick_in_volume(volume, addr, brick):
        try:
            os.getxattr(brick, "trusted.glusterfs.volume-id")
        except OSError:
            # The volume knows this brick but the folder is new: its files are gone (a RAM brick
            # after a restart). It is taken back empty.
            out["lost"] = brick
            out["changed"].append("take the emptied brick back into " + volume)
            if not check:
                os.setxattr(brick, "trusted.glusterfs.volume-id", bytes.fromhex(vid.replace("-", "")))
    out["in_volume"] = bool(vid) and brick_in_volume(volume, addr, brick)
    out["brick_online"] = brick_online(volume, brick)
    print(json.dumps(out))


main()
