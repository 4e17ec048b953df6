#!/usr/bin/python3
"""A host leaves and one joins: hpctrain.torch.elastic next to torchrun --nnodes 2:3.

  elastic_peers.py compare --hpctrain build/tools/hpctrain/hpctrain [--repeats 1]
      Runs the same event under both, one after the other, and prints a JSON
      line per run and per event. Three "hosts" on this machine, one worker
      each: hpctrain launch --min-np 2 --max-np 3 with a discovery script
      listing localhost, 127.0.0.1 and the host name; torchrun as three
      agents (python3 -m torch.distributed.run --nnodes 2:3 --nproc_per_node 1
      --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:PORT --max_restarts 3
      --redirects 1 --tee 1).
      At global step --kill-step the third host's processes are SIGKILLed
      (its worker, and for torchrun its agent); once the job trains again
      with two and has done --rejoin-after more steps, the host comes back
      (discovery lists it again / its agent is started again). The job ends
      at --total-steps.
  elastic_peers.py compare ... --netns
      The same on 3 network-namespace hosts (scripts/netns-cluster.sh up 3),
      one worker each, hpctrain's workers started over ssh and one torchrun
      agent in each host's namespace (rendezvous on host 1's address). The
      third host dies as a whole: every process in its namespace (worker,
      agent, sshd) is SIGKILLed and its link is taken down, so the survivors
      get no FIN and learn of it only when an operation times out
      (--op-timeout-s, for both: HPCT_TIMEOUT_S and the process group's
      timeout). It comes back by its link going up and its sshd (hpctrain)
      or its agent (torchrun) starting again.
  elastic_peers.py rank --mode hpctrain|torchrun ...
      One worker (started by the launcher or by torchrun's agent).

Same training for both: the cnn of ddp_peer.py (conv32-conv64-fc128),
Fashion-MNIST, batch 32 per worker, SGD lr 0.01 x size, momentum 0.9, 1
intra-op thread. hpctrain commits its TorchState every --commit-every steps
(in memory); the torchrun script checkpoints model, optimizer and position to
a file at the end of every epoch of --steps-per-epoch steps and loads it when
its workers start (the usual torchrun recipe). Rank 0 prints the time of
every step, from which:
  leave: time from the kill until a step completes again, steps redone
         (the last step before the kill minus the step training resumed
         from), and lost time = recovery + redone steps x the median step
         time afterwards;
  join:  the longest pause between steps after the host came back, less the
         median step time, steps redone, and lost time likewise.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PY = sys.executable  # the python3 with torch that runs this script
HERE = os.path.abspath(__file__)
BATCH = 32


def data():
    import torch
    from ddp_peer import DATA, read_idx
    images = torch.from_numpy(read_idx(f"{DATA}/train-images-idx3-ubyte.gz")[:8192].copy())
    labels = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz")[:8192].copy()).long()
    return ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1), labels


def batch_of(x_all, labels, step, rank, size):
    start = (step * BATCH * size + rank * BATCH) % (x_all.shape[0] - BATCH)
    return x_all[start:start + BATCH], labels[start:start + BATCH]


def say_step(step, size):
    print("STEP %d size %d t=%.4f" % (step, size, time.time()), flush=True)


def rank_hpctrain(args):
    import torch
    import torch.nn.functional as F
    import hpctrain.torch as hvd
    from ddp_peer import make_model
    torch.set_num_threads(1)
    hvd.init()
    x_all, labels = data()
    torch.manual_seed(42)
    model = make_model("cnn")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt)

    def rescale():
        for g in opt.param_groups:
            g["lr"] = 0.01 * hvd.size()
    state.register_reset_callbacks([rescale])

    @hvd.elastic.run
    def train(state):
        r, n = hvd.rank(), hvd.size()
        while state.step < args.total_steps:
            x, y = batch_of(x_all, labels, state.step, r, n)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            if r == 0:
                say_step(state.step, n)
            if state.step % args.commit_every == 0:
                state.commit()

    train(state)


def rank_torchrun(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_peer import make_model
    torch.set_num_threads(1)
    import datetime
    # Connecting gets a minute, as hpctrain's start does (a worker started
    # late, on a busy host, is not a dead one); each collective after that
    # is bounded by the op timeout, as HPCT_TIMEOUT_S bounds ours.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    dist.set_timeout(datetime.timedelta(seconds=args.op_timeout_s))
    r, n = dist.get_rank(), dist.get_world_size()
    x_all, labels = data()
    torch.manual_seed(42)
    model = DDP(make_model("cnn"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * n, momentum=0.9)
    ckpt = os.path.join(args.dir, "checkpoint.pt")
    step = 0
    if os.path.exists(ckpt):
        saved = torch.load(ckpt)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for g in opt.param_groups:
            g["lr"] = 0.01 * n
        step = saved["step"]
    if r == 0:
        print("RESUMED from step %d size %d t=%.4f" % (step, n, time.time()), flush=True)
    while step < args.total_steps:
        x, y = batch_of(x_all, labels, step, r, n)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        step += 1
        if r == 0:
            say_step(step, n)
            if step % args.steps_per_epoch == 0:
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                            "step": step}, ckpt + ".tmp")
                os.rename(ckpt + ".tmp", ckpt)
    dist.destroy_process_group()


# ---- the driver ----

def steps_of(text):
    return [(int(m.group(1)), int(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"STEP (\d+) size (\d+) t=([0-9.]+)", text)]


class Waited(Exception):
    """A bounded wait ran out: what it waited for, and the log's end."""


def wait_until(log, pred, bound, what):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with open(log) as f:
            text = f.read()
        if pred(text):
            return text
        time.sleep(0.05)
    raise Waited("waited %.0f s for %s; log:\n%s" % (bound, what, open(log).read()[-3000:]))


def last_error(text):
    """The last line of a log that names an error (a Python exception's)."""
    lines = [l.strip() for l in text.splitlines()
             if re.search(r"(Error|Exception|error):", l) and not l.lstrip().startswith("File ")]
    return lines[-1][:300] if lines else "no error line in the log"


def pids_with_env(marker):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % p, "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    out.append(int(p))
        except OSError:
            pass
    return out


def median_step(lines):
    return statistics.median(b[2] - a[2] for a, b in zip(lines, lines[1:]) if b[0] == a[0] + 1)


def analyse_leave(steps, kill_t, join_t):
    """The leave from rank 0's (step, size, time) lines: the world of 3
    before the kill, of 2 after it (until the join, or the log's end)."""
    end = join_t if join_t is not None else float("inf")
    last_before = max(s for s, n, t in steps if n == 3 and t < kill_t)
    two = [x for x in steps if x[1] == 2 and kill_t <= x[2] < end]
    first_two = two[0]
    step_two = median_step(two)
    redone = last_before - (first_two[0] - 1)
    recovery = first_two[2] - kill_t
    return {"event": "leave", "ok": True, "recovery_s": round(recovery, 2), "steps_redone": redone,
            "step_s": round(step_two, 4), "lost_s": round(recovery + redone * step_two, 2)}


def analyse_join(steps, kill_t, join_t):
    """The join: the world of 2 until the third host came back, of 3 after."""
    three = [x for x in steps if x[1] == 3 and x[2] >= join_t]
    step_three = median_step(three)
    last_two = max(s for s, n, t in steps if n == 2 and t >= kill_t)
    redone_j = max(0, last_two - (three[0][0] - 1))
    # The pause: from the last step of 2 to the first of 3, less one step.
    t_last_two = max(t for s, n, t in steps if n == 2 and t >= kill_t)
    pause = max(0.0, three[0][2] - t_last_two - step_three)
    return {"event": "join", "ok": True, "pause_s": round(pause, 2), "steps_redone": redone_j,
            "step_s": round(step_three, 4), "lost_s": round(pause + redone_j * step_three, 2),
            "from_join_to_3_s": round(three[0][2] - join_t, 2)}


class Netns:
    """3 namespace hosts from scripts/netns-cluster.sh, torn down on close."""

    SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "netns-cluster.sh")

    def __init__(self, name):
        self.name = name
        out = subprocess.run([self.SCRIPT, "up", "3", name], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit("netns-cluster.sh up failed:\n" + out.stdout + out.stderr)
        env = dict(l.split("=", 1) for l in out.stdout.splitlines() if l.startswith("NETNS_"))
        self.hosts = env["NETNS_HOSTS"].strip('"').split()
        self.key = env["NETNS_KEY"]
        # Host names as a cluster has them: hI is host I's address on every
        # host (ip netns exec bind-mounts this file over /etc/hosts). torch's
        # agents tell their workers rank 0's host name, not its address.
        for i in range(1, 4):
            os.makedirs("/etc/netns/" + self.ns(i), exist_ok=True)
            with open("/etc/netns/%s/hosts" % self.ns(i), "w") as f:
                f.write("127.0.0.1 localhost\n" + "".join("%s h%d\n" % (h, j + 1) for j, h in enumerate(self.hosts)))

    def ns(self, i):
        return "hpct-%s-h%d" % (self.name, i)

    def kill_host(self, i):
        """Every process in host i's namespace, then its link."""
        pids = subprocess.run(["ip", "netns", "pids", self.ns(i)], capture_output=True, text=True,
                              timeout=10).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "link", "set", "hv%s%d" % (self.name, i), "down"], check=True, timeout=10)
        return [int(p) for p in pids]

    def revive_host(self, i, sshd=True):
        subprocess.run(["ip", "link", "set", "hv%s%d" % (self.name, i), "up"], check=True, timeout=10)
        if sshd:
            subprocess.run([self.SCRIPT, "sshd-start", self.name, str(i)], check=True, timeout=30,
                           capture_output=True)

    def close(self):
        subprocess.run(["ip", "link", "set", "hv%s3" % self.name, "up"], timeout=10)
        subprocess.run([self.SCRIPT, "down", self.name], timeout=120, capture_output=True)


def run_hpctrain(args, d):
    hosts = os.path.join(d, "hosts")
    net = args.net
    names = net.hosts if net else ["localhost", "127.0.0.1", socket.gethostname()]

    def write_hosts(names):
        with open(hosts + ".tmp", "w") as f:
            f.write("".join("%s:1\n" % h for h in names))
        os.rename(hosts + ".tmp", hosts)

    write_hosts(names)
    log = os.path.join(d, "hpctrain.log")
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.hpctrain))))
    cmd = [args.hpctrain, "launch", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
           "cat " + hosts, "--discovery-interval", "0.5", "--blacklist-cooldown", "0", "--start-timeout", "120"]
    if net:
        cmd += ["-i", net.key, "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option",
                "UserKnownHostsFile=/dev/null", "--env", "PYTHONPATH=" + os.path.join(build, "python")]
    cmd += ["--", PY, HERE, "rank", "--mode", "hpctrain", "--total-steps", str(args.total_steps),
            "--commit-every", str(args.commit_every)]
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), HPCT_TIMEOUT_S=str(args.op_timeout_s))
    print("+ " + " ".join(cmd), flush=True)
    with open(log, "w") as out:
        job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(log, lambda t: any(s >= args.kill_step and n == 3 for s, n, _ in steps_of(t)), 300,
                   "step %d with 3 workers" % args.kill_step)
        write_hosts(names[:2])
        kill_t = time.time()
        if net:
            victims = net.kill_host(3)
        else:
            victims = pids_with_env("HPCT_ELASTIC_ID=2")
            for p in victims:
                os.kill(p, signal.SIGKILL)
        text = wait_until(log, lambda t: sum(1 for _, n, tt in steps_of(t) if n == 2 and tt > kill_t)
                          >= args.rejoin_after, 300, "training with 2")
        join_t = time.time()
        if net:
            net.revive_host(3)
        write_hosts(names)
        job.wait(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    text = open(log).read()
    failed = None
    if job.returncode != 0:
        failed = ("join", "the job exited %d: %s" % (job.returncode, last_error(text)))
    return text, kill_t, join_t, victims, failed


def run_torchrun(args, d):
    log = os.path.join(d, "torchrun.log")
    port = 29000 + os.getpid() % 1000
    env = dict(os.environ)

    net = args.net
    master = net.hosts[0] if net else "127.0.0.1"

    def agent(i):
        host = min(i, 2) + 1
        # On host I, in its own UTS namespace named hI.
        where = ["ip", "netns", "exec", net.ns(host), "unshare", "--uts", "sh", "-c",
                 'hostname h%d && exec "$@"' % host, "sh", "env", "GLOO_SOCKET_IFNAME=eth0"] if net else []
        cmd = where + [PY, "-m", "torch.distributed.run", "--nnodes", "2:3", "--nproc_per_node", "1",
               "--rdzv_backend", "c10d", "--rdzv_endpoint", "%s:%d" % (master, port),
               "--rdzv_id", "elastic-peers-%d" % os.getpid(), "--max_restarts", "3",
               # torch 1.13 under Python 3.11 cannot parse the default
               # --redirects 0 (iterating an IntFlag yields only its one-bit members):
               # stdout (1) is teed from log files to the console.
               "--redirects", "1", "--tee", "1"]
        if net:
            # The agent on host 1 serves the c10d store: torch guesses it by
            # matching the endpoint to the machine's host name, which on a
            # namespace host names the head.
            cmd += ["--rdzv_conf", "is_host=%d" % (i == 0)]
        cmd += [HERE, "rank", "--mode", "torchrun", "--total-steps", str(args.total_steps),
               "--steps-per-epoch", str(args.steps_per_epoch), "--dir", d,
               "--op-timeout-s", str(args.op_timeout_s)]
        print("+ " + " ".join(cmd), flush=True)
        out = open(log, "a")  # every agent: rank 0 may be on any of them
        # torch 2.x starts each worker in a session of its own: the agent's
        # process group does not hold it. A mark in the environment, which
        # the worker inherits, finds both.
        mark = dict(env, HPCT_ELASTIC_PEER_AGENT="%d-%d" % (os.getpid(), i))
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=mark,
                                start_new_session=True)

    def kill_agent(i):
        for p in pids_with_env("HPCT_ELASTIC_PEER_AGENT=%d-%d" % (os.getpid(), i)):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    agents = [agent(0)]
    time.sleep(2)  # the first agent hosts the c10d store
    agents += [agent(1), agent(2)]
    failed, join_t = None, None
    try:
        wait_until(log, lambda t: any(s >= args.kill_step and n == 3 for s, n, _ in steps_of(t)), 300,
                   "step %d with 3 workers" % args.kill_step)
        kill_t = time.time()
        if net:
            net.kill_host(3)
        else:
            kill_agent(2)  # the agent and its worker
        agents[2].wait()
        try:
            wait_until(log, lambda t: sum(1 for _, n, tt in steps_of(t) if n == 2 and tt > kill_t)
                       >= args.rejoin_after, 300, "training with 2")
        except Waited as e:
            failed = ("leave", "no step with 2 workers within 300 s of the kill; " + last_error(open(log).read()))
        if failed is None:
            join_t = time.time()
            if net:
                net.revive_host(3)  # its sshd too: the next run starts from a whole cluster
            agents.append(agent(3))
            deadline = time.monotonic() + 600
            for a in (agents[0], agents[1], agents[3]):
                try:
                    a.wait(timeout=max(1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    failed = ("join", "agents still running 600 s after the join")
                    break
    finally:
        for i, a in enumerate(agents):
            if a.poll() is None:
                kill_agent(i)
    text = open(log).read()
    if failed is None and agents[0].returncode != 0:
        failed = ("join", "agent 0 exited %d: %s" % (agents[0].returncode, last_error(text)))
    return text, kill_t, join_t, [agents[2].pid], failed


def compare(args):
    args.net = Netns("ep") if args.netns else None
    try:
        compare_runs(args)
    finally:
        if args.net:
            args.net.close()


def compare_runs(args):
    results = []
    for rep in range(args.repeats):
        for mode, fn in (("hpctrain", run_hpctrain), ("torchrun", run_torchrun)):
            if args.only and mode != args.only:
                continue
            d = tempfile.mkdtemp(prefix="hpct-elastic-peers-")
            load = os.getloadavg()[0]
            text, kill_t, join_t, _, failed = fn(args, d)
            shutil.rmtree(d, ignore_errors=True)
            steps = steps_of(text)
            events = []
            # A failed event is a result too: it is reported with its error,
            # and the events before it with their figures.
            for ev, fn_an in (("leave", analyse_leave), ("join", analyse_join)):
                if failed and failed[0] == ev:
                    events.append({"event": ev, "ok": False, "error": failed[1]})
                    break
                events.append(fn_an(steps, kill_t, join_t))
            for ev in events:
                ev.update({"bench": "elastic", "impl": mode, "repeat": rep, "load1": round(load, 1),
                           "hosts": "netns" if args.netns else "local", "op_timeout_s": args.op_timeout_s,
                           "kill_step": args.kill_step, "commit_every": args.commit_every,
                           "steps_per_epoch": args.steps_per_epoch})
                print(json.dumps(ev), flush=True)
                results.append(ev)
    for ev in ("leave", "join"):
        if args.only:
            break
        h = [r["lost_s"] for r in results if r["event"] == ev and r["impl"] == "hpctrain" and r["ok"]]
        t = [r["lost_s"] for r in results if r["event"] == ev and r["impl"] == "torchrun" and r["ok"]]
        failures = {impl: sum(1 for r in results if r["event"] == ev and r["impl"] == impl and not r["ok"])
                    for impl in ("hpctrain", "torchrun")}
        if not h or not t:
            print(json.dumps({"summary": ev, "hpctrain_lost_s": statistics.median(h) if h else None,
                              "torchrun_lost_s": statistics.median(t) if t else None,
                              "failed_runs": failures, "ratio": None}))
            continue
        print(json.dumps({"summary": ev, "failed_runs": failures, "hpctrain_lost_s": statistics.median(h),
                          "torchrun_lost_s": statistics.median(t),
                          "ratio": round(statistics.median(h) / max(1e-9, statistics.median(t)), 3)}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--hpctrain", required=True)
    c.add_argument("--repeats", type=int, default=1)
    c.add_argument("--only", choices=("hpctrain", "torchrun"), help="run one of the two")
    c.add_argument("--netns", action="store_true", help="3 network-namespace hosts, the third killed whole")
    for q in (c, sub.add_parser("rank")):
        q.add_argument("--total-steps", type=int, default=400)
        q.add_argument("--commit-every", type=int, default=5)
        q.add_argument("--steps-per-epoch", type=int, default=100)
        q.add_argument("--op-timeout-s", type=float, default=6,
                       help="bound on one collective, both sides (HPCT_TIMEOUT_S; the process group's timeout)")
    c.add_argument("--kill-step", type=int, default=150)
    c.add_argument("--rejoin-after", type=int, default=30)
    r = sub.choices["rank"]
    r.add_argument("--mode", choices=("hpctrain", "torchrun"), required=True)
    r.add_argument("--dir", default=".")
    args = p.parse_args()
    if args.cmd == "compare":
        compare(args)
    elif args.mode == "hpctrain":
        rank_hpctrain(args)
    else:
        rank_torchrun(args)


if __name__ == "__main__":
    main()
