#!/usr/bin/python3
# The scratch volume, from its first host, in one round trip: every live
# host a peer, one distributed volume with a brick on each, started, its
# root owned by the training user; bricks of hosts that do not answer named.
#
# Bounded: every peer's glusterd is first tried with a plain TCP connect (2 s).
# A gluster transaction (probe, create, add-brick, start, set) is started
# only when every peer answers: with a peer gone silent, glusterd waits for
# it up to the CLI's 120 s and then holds the volume's lock for minutes.
# Read-only commands (pool list, volume info) are local to this glusterd.
#
#   gluster_volume.py VOLUME BRICK_DIR UID GID OP_TIMEOUT_S [--check] [--restart] --hosts ADDR... [--gone ADDR...]
#     --restart  start the brick processes that do not run (volume start force)
#     --hosts  the hosts in this run (a brick on each), this host first
#     --gone   listed hosts that are not in this run (unreachable, failed)
# Prints one JSON object: changed (what was done), offline (bricks on hosts
# that do not answer), error. A host not in this run gets its brick on a
# later run (add-brick), as does a host added to the hostfile.
"""Makes and keeps the scratch GlusterFS volume; reports bricks that are gone."""

import concurrent.futures
import json
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET


def answers(addr):
    try:
        with socket.create_connection((addr, 24007), 2):
            return True
    except OSError:
        return False


class Gluster:
    def __init__(self, timeout):
        self.timeout = timeout

    def run(self, *args):
        cmd = ["gluster", "--mode=script", "--timeout=%d" % self.timeout] + list(args)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout + 10, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError("`%s` did not answer within %d s" % (" ".join(cmd[3:]), self.timeout + 10))
        if p.returncode != 0:
            raise RuntimeError("`%s` failed: %s" % (" ".join(cmd[3:]), (p.stderr or p.stdout).strip()))
        return p.stdout

    def peers(self):
        """address -> connected, for every peer but this host."""
        out = {}
        for line in self.run("pool", "list").splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 3 and parts[1] != "localhost":
                out[parts[1]] = parts[2] == "Connected"
        return out

    def volume(self, name):
        """{'status': 'Started', 'bricks': [...], 'options': {...}}, or None when it does not exist."""
        p = subprocess.run(["gluster", "--mode=script", "volume", "info", name, "--xml"], capture_output=True,
                           text=True, timeout=self.timeout, check=False)
        try:
            root = ET.fromstring(p.stdout)
        except ET.ParseError:
            return None
        vol = root.find("./volInfo/volumes/volume")
        if vol is None:
            return None
        return {
            "status": vol.findtext("statusStr", ""),
            "bricks": [b.findtext("name", "") for b in vol.findall("./bricks/brick")],
            "options": {o.findtext("name", ""): o.findtext("value", "") for o in vol.findall("./options/option")},
        }


def main():
    args = sys.argv[1:]
    volume, brick, uid, gid, timeout = args[0], args[1], args[2], args[3], int(args[4])
    check = "--check" in args
    hosts, gone, where = [], [], None
    for a in args[5:]:
        if a in ("--hosts", "--gone"):
            where = hosts if a == "--hosts" else gone
        elif not a.startswith("--") and where is not None:
            where.append(a)
    me = hosts[0]
    g = Gluster(timeout)
    out = {"changed": [], "offline": [], "error": ""}
    try:
        others = [h for h in hosts[1:] + gone]
        with concurrent.futures.ThreadPoolExecutor(max(1, len(others))) as pool:
            silent = [h for h, ok in zip(others, pool.map(answers, others)) if not ok]
        peers = g.peers()
        vol = g.volume(volume)
        # Bricks of the volume on hosts that do not answer. A host left out of this run
        # (failed in an earlier step) that answers still serves its brick.
        if vol:
            out["offline"] = [b for b in vol["bricks"] if b.split(":", 1)[0] in silent]
        # Peers in the pool that are silent block every transaction.
        blocked = [h for h in peers if h in silent]
        live = [h for h in hosts if h not in silent]
        todo = []
        for h in live[1:]:
            if h not in peers:
                todo.append(("probe " + h, ["peer", "probe", h]))
        want = ["%s:%s" % (h, brick) for h in live]
        if vol is None:
            # Over the hosts in this run; one left out joins with add-brick on a later run.
            todo.append(("create " + volume, ["volume", "create", volume, "transport", "tcp"] + want + ["force"]))
        else:
            new = [b for b in want if b not in vol["bricks"]]
            if new:
                todo.append(("add " + " ".join(new), ["volume", "add-brick", volume] + new + ["force"]))
        started = vol is not None and vol["status"] == "Started"
        if not started:
            todo.append(("start " + volume, ["volume", "start", volume]))
        opts = {} if vol is None else vol["options"]
        for key, value in (("storage.owner-uid", uid), ("storage.owner-gid", gid)):
            if opts.get(key) != value:
                todo.append(("set %s %s" % (key, value), ["volume", "set", volume, key, value]))
        restart = "--restart" in args and started
        if restart:
            todo.append(("restart the stopped bricks", ["volume", "start", volume, "force"]))
        if todo and blocked:
            raise RuntimeError("cannot %s while the peer(s) %s do not answer on port 24007"
                               % (todo[0][0], ", ".join(blocked)))
        for what, cmd in todo:
            out["changed"].append(what)
            if check:
                continue
            g.run(*cmd)
            if cmd[:2] == ["peer", "probe"]:
                # Bounded: the new peer must be in the cluster before a brick is placed on it.
                deadline = time.monotonic() + timeout
                while not g.peers().get(cmd[2]) and time.monotonic() < deadline:
                    time.sleep(0.5)
                if not g.peers().get(cmd[2]):
                    raise RuntimeError("peer %s did not connect within %d s after the probe" % (cmd[2], timeout))
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        out["error"] = str(e)
    out["me"] = me
    print(json.dumps(out))


main()
