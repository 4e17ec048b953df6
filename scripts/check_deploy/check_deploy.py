#!/usr/bin/env python3
"""Offline checks of hpctrain's deploy recipes (scripts/check-deploy.sh runs
this): YAML and JSON parse; CloudFormation (cfn.py), ParallelCluster
(schemas/pcluster-v3.json), Terraform (terraform.py), Kubernetes (kube.py),
Dockerfiles (dockerfile.py); shellcheck on shell scripts and sbatch files,
with the #SBATCH options checked against sbatch's; ansible-lint on a
playbook folder. Prints one line per finding, FILE:LINE: PLACE: MESSAGE,
and exits 1 when there is any, 0 otherwise, 2 when a check cannot run (a
tool is missing)."""

import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict

import jsonschema
import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cfn  # noqa: E402
import dockerfile  # noqa: E402
import kube  # noqa: E402
import lineyaml  # noqa: E402
import terraform  # noqa: E402
from report import Report  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP_DIRS = {".terraform", ".git", "__pycache__"}
# sbatch's long options (Slurm 22.05 man page) the recipes may use.
SBATCH_OPTIONS = {
    "account", "array", "begin", "chdir", "comment", "constraint", "cpus-per-task", "dependency", "error",
    "exclusive", "export", "gres", "gpus", "gpus-per-node", "hint", "input", "job-name", "mail-type",
    "mail-user", "mem", "mem-per-cpu", "nodelist", "nodes", "ntasks", "ntasks-per-node", "open-mode",
    "output", "partition", "qos", "requeue", "no-requeue", "signal", "time", "time-min", "wait-all-nodes",
    "exclude", "distribution", "overcommit", "kill-on-invalid-dep", "propagate", "reservation",
}
SBATCH_SHORT = {"A": "account", "a": "array", "c": "cpus-per-task", "D": "chdir", "e": "error",
                "J": "job-name", "N": "nodes", "n": "ntasks", "o": "output", "p": "partition", "t": "time",
                "w": "nodelist", "x": "exclude", "G": "gpus", "C": "constraint", "d": "dependency"}


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                files += [os.path.join(root, n) for n in sorted(names)]
        elif os.path.exists(p):
            files.append(p)
        else:
            print(f"{p}: no such file or folder", file=sys.stderr)
            sys.exit(2)
    return files


def in_ansible(path):
    return "ansible" in os.path.normpath(path).split(os.sep)


def ansible_root(path):
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    i = len(parts) - 1 - parts[::-1].index("ansible")
    return os.sep.join(parts[: i + 1])


def is_shell(path):
    if path.endswith((".sh", ".sbatch", ".bash")):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(64)
        return head.startswith(b"#!") and (b"sh" in head.split(b"\n")[0])
    except OSError:
        return False


def check_sbatch_options(path, text, report):
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"#SBATCH\s+(.*)", line)
        if not m:
            continue
        for opt in re.findall(r"(?:^|\s)(--?[A-Za-z][A-Za-z-]*)", m.group(1)):
            name = opt[2:] if opt.startswith("--") else SBATCH_SHORT.get(opt[1:], "?" + opt[1:])
            if name not in SBATCH_OPTIONS:
                report.error(path, n, "#SBATCH", f"'{opt}' is not an sbatch option the checker knows")


def run_shellcheck(path, report):
    shell = "bash"
    r = subprocess.run(["shellcheck", "-s", shell, "-x", "-f", "gcc", path], capture_output=True, text=True)
    for msg in r.stdout.splitlines():
        report.errors.append(msg)
    if r.returncode not in (0, 1):
        report.error(path, 0, "shellcheck", r.stderr.strip() or f"shellcheck exited {r.returncode}")


def main(argv):
    repo = os.path.dirname(os.path.dirname(HERE))
    paths = argv or [os.path.join(repo, "deploy")]
    report = Report()
    files = collect(paths)
    tf_modules = defaultdict(list)
    manifests = []
    ansible_roots = set()
    pcluster = json.load(open(os.path.join(HERE, "schemas", "pcluster-v3.json")))
    counts = defaultdict(int)
    for f in files:
        base = os.path.basename(f)
        if in_ansible(f):
            ansible_roots.add(ansible_root(f))
        if f.endswith((".yaml", ".yml")):
            text = open(f, encoding="utf-8").read()
            try:
                docs = [d for d in lineyaml.load_all(text) if d is not None] if not in_ansible(f) \
                    else [d for d in yaml.load_all(text, Loader=yaml.BaseLoader)]
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                report.error(f, mark.line + 1 if mark else 0, "", f"YAML does not parse: "
                             f"{getattr(e, 'problem', None) or e}")
                continue
            counts["yaml"] += 1
            if in_ansible(f):
                continue
            k8s = [d for d in docs if kube.is_manifest(d)]
            if k8s:
                manifests.append((f, k8s))
                counts["kubernetes"] += 1
            for d in docs:
                if cfn.is_template(d):
                    cfn.check(f, d, report, text)
                    counts["cloudformation"] += 1
                elif isinstance(d, dict) and "HeadNode" in d and "Scheduling" in d:
                    counts["parallelcluster"] += 1
                    for e in jsonschema.Draft7Validator(pcluster).iter_errors(d):
                        report.error(f, kube._line_at(d, list(e.absolute_path)),
                                     ".".join(str(p) for p in e.absolute_path) or "(top)", e.message)
        elif f.endswith(".json"):
            try:
                doc = json.load(open(f, encoding="utf-8"))
            except json.JSONDecodeError as e:
                report.error(f, e.lineno, "", f"JSON does not parse: {e.msg}")
                continue
            counts["json"] += 1
            if cfn.is_template(doc):
                cfn.check(f, doc, report)
                counts["cloudformation"] += 1
        elif f.endswith(".tf"):
            tf_modules[os.path.dirname(os.path.abspath(f))].append(f)
        elif dockerfile.is_dockerfile(f):
            dockerfile.check(f, report)
            counts["dockerfile"] += 1
        elif is_shell(f) and not in_ansible(f):
            text = open(f, encoding="utf-8").read()
            if f.endswith(".sbatch") or "#SBATCH" in text:
                check_sbatch_options(f, text, report)
            run_shellcheck(f, report)
            counts["shell"] += 1
    try:
        terraform.check_modules(tf_modules, report)
    except terraform.ParserUnavailable as e:
        print(f"check-deploy: {e}", file=sys.stderr)
        return 2
    if tf_modules:
        counts["terraform modules"] += len(tf_modules)
    if manifests:
        kube.check_files(manifests, report)
    for root in sorted(ansible_roots):
        if not os.path.isfile(os.path.join(root, "site.yml")):
            continue
        if shutil.which("ansible-lint") is None:
            report.note(f"ansible: SKIPPED: ansible-lint is not installed (apt-get install ansible-lint); {root} not linted")
            continue
        r = subprocess.run(["ansible-lint", "--offline", "--nocolor", "-p"], cwd=root, capture_output=True,
                           text=True, timeout=300)
        counts["ansible folders"] += 1
        if r.returncode != 0:
            for line in (r.stdout.strip().splitlines() or r.stderr.strip().splitlines()[-5:]):
                report.errors.append(f"{os.path.join(root, line) if ':' in line else root}: ansible-lint: {line}"
                                     if not line.startswith(root) else line)
    for n in report.notes:
        print(f"check-deploy: {n}", file=sys.stderr)
    for e in report.errors:
        print(e)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    if report.errors:
        print(f"check-deploy: {len(report.errors)} problem(s) in {len(files)} file(s) ({summary})", file=sys.stderr)
        return 1
    print(f"check-deploy: OK, {len(files)} file(s) ({summary})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
