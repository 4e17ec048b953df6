"""Dockerfile checks (hadolint is not in Debian): known instructions; the
image starts FROM Debian 12; every COPY/ADD source exists in the build context
(the Dockerfile's folder), except the hpctrain package, which `make package`
builds and the user copies in, so it must match the name the package has
(hpctrain_<version>_amd64.deb); apt-get installs say -y and clean their lists in
the same RUN; every RUN passes shellcheck as sh; the image has a CMD or
ENTRYPOINT."""

import fnmatch
import glob
import os
import subprocess

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}
DEBIAN12 = {"debian:12", "debian:bookworm", "debian:12-slim", "debian:bookworm-slim"}
PACKAGE_PATTERN = "hpctrain_*_amd64.deb"


def is_dockerfile(path):
    base = os.path.basename(path)
    return base == "Dockerfile" or base.endswith(".Dockerfile") or base.startswith("Dockerfile.")


def instructions(text):
    """(line, INSTRUCTION, arguments) with continuation lines joined."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line + "\n"  # kept: RUN's shell text is checked as written
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word, rest.strip()))
        buf = ""
    if buf:
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word, rest.strip()))
    return out


def check(path, report):
    text = open(path, encoding="utf-8").read()
    context = os.path.dirname(os.path.abspath(path))
    ins = instructions(text)
    if not ins:
        report.error(path, 0, "", "empty Dockerfile")
        return
    froms = [(n, a) for n, w, a in ins if w.upper() == "FROM"]
    first = next(((n, w, a) for n, w, a in ins if w.upper() != "ARG"), None)
    if first is None or first[1].upper() != "FROM":
        report.error(path, first[0] if first else 0, "", "the first instruction (after ARG) must be FROM")
    for n, a in froms:
        image = a.split()[0] if a.split() else ""
        if image not in DEBIAN12 and not any(image.startswith(d + "@") for d in DEBIAN12):
            report.error(path, n, "FROM", f"base image '{image}' is not Debian 12 ({', '.join(sorted(DEBIAN12))})")
    has_cmd = False
    for n, word, args in ins:
        w = word.upper()
        if w not in INSTRUCTIONS:
            report.error(path, n, word, f"unknown instruction '{word}'")
            continue
        if w in ("CMD", "ENTRYPOINT"):
            has_cmd = True
        if w in ("COPY", "ADD"):
            parts = [p for p in args.split() if not p.startswith("--")]
            args = args.replace("\\\n", " ")
            if args.startswith("["):
                import json
                parts = json.loads(args)
            if len(parts) < 2:
                report.error(path, n, w, f"{w} needs a source and a destination")
                continue
            for src in parts[:-1]:
                if fnmatch.fnmatch(os.path.basename(src), PACKAGE_PATTERN) or src == PACKAGE_PATTERN:
                    continue
                if not glob.glob(os.path.join(context, src)):
                    report.error(path, n, w, f"source '{src}' does not exist in the build context {context}")
        if w == "RUN":
            cmd = args
            if cmd.startswith("["):
                continue
            if "apt-get install" in cmd:
                if " -y" not in cmd and "--yes" not in cmd and "--assume-yes" not in cmd:
                    report.error(path, n, "RUN", "apt-get install without -y waits for an answer nobody gives")
                if "rm -rf /var/lib/apt/lists" not in cmd:
                    report.error(path, n, "RUN", "apt-get install without `rm -rf /var/lib/apt/lists/*` "
                                 "in the same RUN keeps the lists in the layer")
                if "apt-get update" not in cmd:
                    report.error(path, n, "RUN", "apt-get install without apt-get update in the same RUN "
                                 "uses stale or missing lists")
            r = subprocess.run(["shellcheck", "-s", "sh", "-f", "gcc", "-"], input=cmd + "\n",
                               capture_output=True, text=True)
            for msg in r.stdout.splitlines():
                _, line, _, rest = msg.split(":", 3)
                report.error(path, n + int(line) - 1, "RUN (shellcheck)", rest.strip())
    if not has_cmd:
        report.error(path, 0, "", "no CMD or ENTRYPOINT: the image does nothing when run")
