#!/usr/bin/python3
# What the roles need to know about a host, read in one go (one ssh round
# trip instead of a dozen modules): its name, system, addresses, users and
# groups, /etc/hosts, mounts, the packages given as arguments, the bundle it
# holds, whether its kernel has NFS, a GPU, and its ssh host keys (read here,
# over the authenticated connection, for every other host's known_hosts);
# and the state of the files and the account setup manages (checksum, owner,
# group, mode; the training user's entry; slurmd -C), so that a rerun skips
# the steps whose result is already there instead of a round trip each.
# Read-only; prints one JSON object.
#
#   host_facts.py PACKAGE... [--user NAME] [--files PATH...] [--pidfiles PATH...]
"""Prints the facts hpctrain's roles use about this host as JSON."""

import glob
import grp
import hashlib
import json
import os
import pwd
import socket
import subprocess
import sys


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def os_release():
    out = {}
    for line in read("/etc/os-release").splitlines():
        key, _, value = line.partition("=")
        out[key] = value.strip().strip('"')
    return out


def interfaces():
    try:
        text = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                              timeout=10, check=True).stdout
        return {i["ifname"]: [a["local"] for a in i.get("addr_info", [])] for i in json.loads(text)}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return {}


def installed(names):
    want = set(names)
    out = {}
    for stanza in read("/var/lib/dpkg/status").split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ": " in line:
                key, value = line.split(": ", 1)
                fields[key] = value
        name = fields.get("Package")
        if name in want and fields.get("Status") == "install ok installed":
            out[name] = fields.get("Version", "")
    return out


def host_keys():
    paths = []
    try:
        text = subprocess.run(["/usr/sbin/sshd", "-T"], capture_output=True, text=True, timeout=10).stdout
        paths = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("hostkey ")]
    except (OSError, subprocess.SubprocessError):
        pass
    if not paths:
        paths = [p[:-4] for p in glob.glob("/etc/ssh/ssh_host_*_key.pub")]
    keys = []
    for p in paths:
        words = read(p + ".pub").split()
        if len(words) >= 2:
            keys.append(words[0] + " " + words[1])
    return sorted(set(keys))


def mounts(field=2):
    """mount point -> its type (field 2) or source (field 0)."""
    out = {}
    for line in read("/proc/self/mounts").splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out[parts[1].replace("\\040", " ")] = parts[field]
    return out


def file_state(path):
    """[sha1 or 'dir', owner, group, mode] of a file or folder; None when absent."""
    try:
        st = os.stat(path)
        if os.path.isdir(path):
            digest = "dir"
        else:
            with open(path, "rb") as f:
                digest = hashlib.sha1(f.read()).hexdigest()
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        return [digest, owner, group, "%04o" % (st.st_mode & 0o7777)]
    except OSError:
        return None


def user_entry(name):
    try:
        p = pwd.getpwnam(name)
        return [p.pw_uid, p.pw_gid, p.pw_dir, p.pw_shell]
    except KeyError:
        return None


def running(pidfile):
    """Whether the pid file names a live process."""
    try:
        pid = int(read(pidfile).strip() or 0)
        return pid > 0 and os.path.exists("/proc/%d" % pid)
    except ValueError:
        return False


def slurmd_c():
    if not os.path.exists("/usr/sbin/slurmd"):
        return []
    try:
        return subprocess.run(["/usr/sbin/slurmd", "-C"], capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []


def base_id():
    """A checksum of what an install depends on besides the packages asked
    for: the installed packages, the release, the architecture, the users
    and groups. Hosts with the same one (and the same packages missing) get
    the same files from the same install, so setup installs on one of them
    and copies the result to the others."""
    h = hashlib.sha256(os.uname().machine.encode())
    for path in ("/var/lib/dpkg/status", "/var/lib/dpkg/arch", "/etc/debian_version", "/etc/os-release",
                 "/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b"-"
        h.update(b"\0" + path.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def main():
    packages, user, files, pidfiles, where = [], "", [], [], "packages"
    for a in sys.argv[1:]:
        if a in ("--user", "--files", "--pidfiles"):
            where = a
        elif where == "--user":
            user, where = a, "packages"
        elif where == "--files":
            files.append(a)
        elif where == "--pidfiles":
            pidfiles.append(a)
        else:
            packages.append(a)
    release = os_release()
    facts = {
        "hostname": socket.gethostname().split(".")[0],
        "os_id": release.get("ID", ""),
        "os_like": release.get("ID_LIKE", ""),
        "os_name": release.get("PRETTY_NAME", "unknown"),
        "interfaces": interfaces(),
        "passwd": {p.pw_name: [p.pw_uid, p.pw_gid] for p in pwd.getpwall()},
        "group": {g.gr_name: g.gr_gid for g in grp.getgrall()},
        "etc_hosts": read("/etc/hosts"),
        "etc_hostname": read("/etc/hostname").strip(),
        "fstab": read("/etc/fstab"),
        "mounts": mounts(),
        "mount_sources": mounts(0),
        "packages": installed(packages),
        "bundle_id": read("/var/cache/hpctrain/bundle/.bundle-id").strip(),
        "nfs": "nfs" in read("/proc/filesystems").split()
               or os.path.isdir("/lib/modules/%s/kernel/fs/nfs" % os.uname().release),
        "gpu": os.path.exists("/dev/nvidia0"),
        "host_keys": host_keys(),
        "user": user_entry(user) if user else None,
        "files": {f: file_state(f) for f in files},
        "slurmd_c": slurmd_c(),
        "ssh_known_hosts": read("/etc/ssh/ssh_known_hosts"),
        "running": {p: running(p) for p in pidfiles},
        "base_id": base_id(),
        # Hosts with the same boot id run on one kernel (containers, network
        # namespaces) and share its CPUs: the packages step installs on as
        # many of them as there are CPUs and copies to the rest.
        "kernel": read("/proc/sys/kernel/random/boot_id").strip(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    print(json.dumps(facts))


main()
