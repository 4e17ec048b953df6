# Filters for the hpctrain playbooks: the decisions that look at every host
# at once (which uid the training user gets, which /etc/hosts and
# ssh_known_hosts lines every host carries), kept here as plain functions so
# they are unit-tested (tests/cluster_filters_test.py) without any host.
"""hpctrain filters: cluster-wide uid choice, /etc/hosts and known_hosts text."""

import re

FIRST_ID = 1000
LAST_ID = 59999
HOSTS_BEGIN = "# BEGIN hpctrain cluster (managed by hpctrain cluster setup; edits are overwritten)"
HOSTS_END = "# END hpctrain cluster"


def _is_loopback(addr):
    return addr.startswith("127.") or addr == "::1"


def id_plan(host_data, user, wanted_uid=0):
    """Chooses the training user's uid (= gid) for every host.

    host_data: {host: {"passwd": {name: [uid, gid]}, "group": {name: gid}}}, as
    roles/preflight/files/host_facts.py reports them. wanted_uid 0 means: the uid the
    user already has (where every host that has it agrees), else the first id
    free for both user and group on every host.

    Returns {"uid": N, "gid": N, "errors": {host: message}}; a host with an
    error must not be changed (the id is taken there, or the user exists
    there with another id). Messages name the host, the id and its owner,
    and end with a fix.
    """
    wanted = int(wanted_uid or 0)
    existing = {}
    for host, data in sorted(host_data.items()):
        entry = data.get("passwd", {}).get(user)
        if entry:
            existing[host] = (int(entry[0]), int(entry[1]))

    def taken_on(host, uid):
        """(kind, owner) when uid or gid `uid` belongs to someone else on host."""
        data = host_data[host]
        for name, entry in sorted(data.get("passwd", {}).items()):
            if name != user and int(entry[0]) == uid:
                return "uid", name
        for name, gid in sorted(data.get("group", {}).items()):
            if name != user and int(gid) == uid:
                return "gid", name
        return None

    def free_everywhere(uid):
        return all(taken_on(h, uid) is None for h in host_data)

    def first_free():
        for uid in range(FIRST_ID, LAST_ID + 1):
            if free_everywhere(uid):
                return uid
        return None

    if wanted == 0:
        uids = sorted({ids[0] for ids in existing.values()})
        wanted = uids[0] if len(uids) == 1 else 0
        if len(uids) > 1:
            # The user exists with several uids: name every host and let the admin choose.
            free = first_free()
            seen = ", ".join(f"{u} on {', '.join(h for h in sorted(existing) if existing[h][0] == u)}"
                             for u in uids)
            errors = {}
            for host in existing:
                errors[host] = (f"user {user} has different uids across the cluster ({seen}): "
                                f"fix: choose one with --uid N (e.g. --uid {free}, free on every host) "
                                f"and the hosts with another uid get 'usermod -u N {user}'")
            return {"uid": 0, "gid": 0, "errors": errors}
        if wanted == 0:
            wanted = first_free() or 0
    errors = {}
    free = None
    for host in sorted(host_data):
        clash = taken_on(host, wanted)
        have = existing.get(host)
        if clash:
            kind, owner = clash
            if free is None:
                free = first_free()
            what = "user" if kind == "uid" else "group"
            errors[host] = (f"{kind} {wanted} is taken on {host} by {what} {owner}: "
                            f"fix: give the training user another id with --uid {free} "
                            f"(free on every host), or move {owner} off {wanted} on {host}")
        elif have and have != (wanted, wanted):
            errors[host] = (f"user {user} already exists on {host} with uid {have[0]} gid {have[1]}, "
                            f"not {wanted}: fix: on {host} 'usermod -u {wanted} {user} && "
                            f"groupmod -g {wanted} {user}' (then chown its files), or --uid {have[0]}")
    return {"uid": wanted, "gid": wanted, "errors": errors}


def etc_hosts(text, own_names, block_lines):
    """/etc/hosts with the host's own names off loopback lines and the managed block.

    The Debian installer's "127.0.1.1 <hostname>" makes MPI and Gloo ranks
    advertise a loopback address; the name is removed from every loopback
    line (a line left with no name goes), localhost stays. The block holds
    one "address name..." line per cluster host and replaces an earlier
    block. A block line that is just an address (a host whose name is not
    known this run: unreachable, listed by address) keeps that address's
    line from the earlier block, so a host that is down is not forgotten.
    """
    names = {n for n in own_names if n and n != "localhost"}
    out = []
    old_block = {}
    in_block = False
    for line in text.splitlines():
        if line == HOSTS_BEGIN:
            in_block = True
            continue
        if in_block:
            if line == HOSTS_END:
                in_block = False
            elif line.split():
                old_block[line.split()[0]] = line
            continue
        body, _, comment = line.partition("#")
        words = body.split()
        if words and _is_loopback(words[0]) and names.intersection(words[1:]):
            kept = [w for w in words[1:] if w not in names]
            if not kept:
                continue
            line = words[0] + "\t" + " ".join(kept) + ("\t#" + comment if comment else "")
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    block = []
    for line in block_lines:
        words = line.split()
        if len(words) == 1:
            if words[0] in old_block:
                block.append(old_block[words[0]])
            continue
        block.append(line)
    out += [HOSTS_BEGIN] + block + [HOSTS_END]
    return "\n".join(out) + "\n"


def hosts_entries(hostvars, hosts):
    """[{"address", "names"}] for every listed host, from the inventory and
    what preflight learnt (hpct_name). A host listed by name is known by it
    even when unreachable; one listed by address and never reached has no
    names (etc_hosts keeps its earlier line)."""
    entries = []
    for h in hosts:
        v = hostvars[h]
        address = v.get("ansible_host", h)
        names = []
        name = v.get("hpct_name")
        if name:
            names.append(name)
        if _truthy(v.get("hpct_set_hostname", False)):
            names += [h, h.split(".")[0]]
        entries.append({"address": address, "names": names})
    return entries


def _truthy(value):
    return str(value).lower() in ("true", "yes", "1")


def hosts_block(entries):
    """The managed /etc/hosts lines: [{"address", "names"}] -> ["10.0.0.1 node1", ...];
    an entry without names gives just its address (see etc_hosts)."""
    lines = []
    for h in entries:
        names = []
        for n in h.get("names", []):
            if n and n not in names and n != h["address"]:
                names.append(n)
        lines.append(" ".join([h["address"]] + names))
    return lines


def known_hosts(scan_text, hosts):
    """ssh_known_hosts lines from ssh-keyscan output.

    scan_text: ssh-keyscan's lines ("10.0.0.1 ssh-ed25519 AAAA..."); hosts:
    [{"address", "names"}]. Each key is listed under the host's names and
    address, so ssh finds it whichever one a hostfile uses. Sorted, so the
    file does not change between runs.
    """
    by_addr = {h["address"]: h for h in hosts}
    lines = set()
    for line in scan_text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 3 or parts[0] not in by_addr:
            continue
        h = by_addr[parts[0]]
        names = []
        for n in list(h.get("names", [])) + [h["address"]]:
            if n and n not in names:
                names.append(n)
        lines.add(",".join(names) + " " + parts[1] + " " + parts[2])
    return sorted(lines)


def cluster_interface(interfaces, address):
    """The interface that holds `address` (the host's cluster address), else
    the first one that is not loopback, else eth0: the ranks bind and
    advertise on it. interfaces: {name: [IPv4 addresses]}."""
    for name, addrs in sorted(interfaces.items()):
        if address in addrs:
            return name
    others = sorted(n for n in interfaces if n != "lo")
    return others[0] if others else "eth0"


def host_key_lines(hostvars, hosts):
    """ssh_known_hosts lines from the keys each host reported (host_keys),
    under its names and address; sorted so the file does not change between
    runs."""
    lines = set()
    for entry, h in zip(hosts_entries(hostvars, hosts), hosts):
        facts = hostvars[h].get("hpct_host") or {}
        names = []
        for n in list(entry["names"]) + [entry["address"]]:
            if n and n not in names:
                names.append(n)
        for key in facts.get("host_keys", []):
            lines.add(",".join(names) + " " + key)
    return sorted(lines)


def same_name(names, host):
    """The other hosts that carry host's name: names is {host: name}."""
    mine = names.get(host)
    return sorted(h for h, n in names.items() if h != host and n == mine)


def shell_safe(value):
    """True when value can be used unquoted in a shell word (user names, paths)."""
    return re.fullmatch(r"[A-Za-z0-9_./:@+-]+", str(value)) is not None


def clone_plan(keys, cpus=None):
    """{host: the host whose install it copies, or ''}: keys is {host: clone
    key} in play order (the same key: the same base system, the same
    packages missing and the same kernel; '' for a host that installs
    nothing or cannot share). cpus is {host: CPUs of its kernel}: the first
    that many hosts of each group install side by side (1 when not given),
    and the rest copy them in turn."""
    leaders = {}
    turns = {}
    plan = {}
    for host, key in keys.items():
        if not key:
            plan[host] = ""
            continue
        group = leaders.setdefault(key, [])
        wanted = max(1, int((cpus or {}).get(group[0] if group else host) or 1))
        if len(group) < wanted:
            group.append(host)
            plan[host] = ""
        else:
            turn = turns.get(key, 0)
            plan[host] = group[turn % len(group)]
            turns[key] = turn + 1
    return plan


def clone_jobs(plan, hostvars):
    """What the head's copying step needs: [{"from": ssh target, "to":
    [ssh targets]}] per installing host with copies, from clone_plan's plan."""
    def target(host):
        v = hostvars[host]
        return {"name": host, "host": str(v.get("ansible_host") or host),
                "port": int(v.get("ansible_port") or 22), "user": str(v.get("ansible_user") or "root"),
                "key": str(v.get("ansible_ssh_private_key_file") or ""),
                "args": str(v.get("ansible_ssh_common_args") or "")}
    jobs = {}
    for host, leader in plan.items():
        if leader:
            jobs.setdefault(leader, []).append(host)
    return [{"from": target(leader), "to": [target(h) for h in clones]} for leader, clones in jobs.items()]


class FilterModule:
    """The filters the roles use."""

    def filters(self):
        return {
            "hpct_id_plan": id_plan,
            "hpct_etc_hosts": etc_hosts,
            "hpct_hosts_block": hosts_block,
            "hpct_hosts_entries": hosts_entries,
            "hpct_known_hosts": known_hosts,
            "hpct_shell_safe": shell_safe,
            "hpct_cluster_interface": cluster_interface,
            "hpct_same_name": same_name,
            "hpct_host_key_lines": host_key_lines,
            "hpct_clone_plan": clone_plan,
            "hpct_clone_jobs": clone_jobs,
        }
