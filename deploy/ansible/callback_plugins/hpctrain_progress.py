# The output of `hpctrain cluster setup`: one line per host per step, each
# failure with the host, what failed and a fix line, and at the end which
# steps ran where. With -v (or more) Ansible's own output is printed instead.
# A JSON summary of the same (per host: changed steps, the failure and its
# fix) goes to the file named by HPCTRAIN_ANSIBLE_SUMMARY, for hpctrain and tests,
# with where the time went: seconds per step and per task (from one task's
# start to the next's), the profile of a run.
"""hpctrain's stdout callback: per-host progress lines and a summary."""

import json
import os
import time

from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = """
    name: hpctrain_progress
    type: stdout
    short_description: one progress line per host per step, failures with a fix
    description:
      - Prints one line per host for each task that ran (skipped tasks are not shown),
        the message and a fix line for each failure or unreachable host, and a summary
        naming which steps ran on which host. With -v, Ansible's default output.
    extends_documentation_fragment:
      - default_callback
    options:
      summary_file:
        description: Where to write the JSON summary (nothing when empty).
        default: ""
        env:
          - name: HPCTRAIN_ANSIBLE_SUMMARY
      status_table:
        description: Print only failures and a host-by-step table (cluster status).
        type: bool
        default: false
        env:
          - name: HPCTRAIN_ANSIBLE_STATUS
      ssh_key:
        description: The key given to setup, for the fix line when a host refuses it.
        default: ""
        env:
          - name: HPCTRAIN_ANSIBLE_SSH_KEY
"""

STEPS = ["preflight", "hosts", "user", "ssh_trust", "packages", "profile", "shared_dir", "slurm", "scratch"]


def split_fix(message):
    """'problem: fix: action' -> ('problem', 'action')."""
    text = " ".join(str(message).split())
    at = text.find(" fix: ")
    if at < 0:
        at = text.find("fix: ")
        if at != 0:
            return text, ""
    return text[:at].rstrip(" :"), text[at:].strip()[len("fix: "):]


def unreachable_fix(host, message, key):
    """What to do about a host ssh could not log in to."""
    m = str(message)
    key_pub = (key + ".pub") if key else "KEY.pub"
    if "Permission denied" in m:
        return (f"the key was refused by root@{host}",
                f"authorize it there: ssh-copy-id -i {key_pub} root@{host} (or give the right key with -i)")
    if "Connection refused" in m:
        return (f"no sshd answers on {host}", f"start sshd on {host} (systemctl start ssh)")
    if "Host key verification failed" in m or "IDENTIFICATION HAS CHANGED" in m:
        return (f"{host}'s host key is not the one setup saw before",
                f"if {host} was reinstalled, delete its line from the setup's admin_known_hosts file")
    if "Could not resolve" in m:
        return (f"{host} does not resolve", f"add '<address> {host}' to /etc/hosts here, or list its address")
    return (f"{host} is unreachable",
            f"check that {host} is up and TCP port 22 is open to it from here (ssh -v root@{host})")


class CallbackModule(DefaultCallback):
    """Compact progress for hpctrain; the default callback's output with -v."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "hpctrain_progress"

    def __init__(self):
        super().__init__()
        self._t0 = time.monotonic()
        self._task = None
        self._role = ""
        self._hosts = {}
        self._width = 8
        self._check = False
        self._item_errors = {}
        self._timeline = []  # [role: task, its start], in order

    # --- helpers ---
    def _raw(self):
        return self._display.verbosity > 0

    def _host(self, name):
        if name not in self._hosts:
            self._hosts[name] = {"ok": 0, "changed": 0, "failed": False, "unreachable": False,
                                 "steps": [], "changed_tasks": [], "failed_step": "", "failed_task": "",
                                 "message": "", "fix": "", "notes": []}
            self._width = max(self._width, len(name))
        return self._hosts[name]

    def _line(self, host, verdict, text=""):
        if self.get_option("status_table") and verdict not in ("FAILED", "UNREACHABLE"):
            return
        elapsed = time.monotonic() - self._t0
        title = f"{self._role}: {self._task}" if self._role else str(self._task)
        self._display.display(f"{elapsed:7.1f}s  {host:<{self._width}}  {verdict:<12} {text or title}")

    def _detail(self, text):
        if text:
            self._display.display(" " * (self._width + 12) + text)

    def _note_step(self, host):
        h = self._host(host)
        if self._role in STEPS and self._role not in h["steps"]:
            h["steps"].append(self._role)

    def _failure_message(self, result):
        r = result._result
        msg = r.get("msg", "")
        item_msg = self._item_errors.pop(result._host.get_name(), "")
        if item_msg and (not msg or "items failed" in msg):
            msg = item_msg
        if not msg or msg.startswith("non-zero return code"):
            err = (r.get("stderr") or r.get("module_stderr") or r.get("stdout") or "").strip()
            tail = err.splitlines()[-3:] if err else []
            msg = (msg + ": " if msg else "") + " / ".join(tail)
        return msg or "failed without a message"

    # --- playbook events ---
    def v2_playbook_on_start(self, playbook):
        self._t0 = time.monotonic()
        if self._raw():
            super().v2_playbook_on_start(playbook)

    def v2_playbook_on_play_start(self, play):
        self._check = bool(getattr(play, "check_mode", False)) or self._check_mode_from_context()
        if self._raw():
            super().v2_playbook_on_play_start(play)

    @staticmethod
    def _check_mode_from_context():
        try:
            from ansible import context
            return bool(context.CLIARGS.get("check", False))
        except Exception:  # pylint: disable=broad-except
            return False

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task.get_name().split(" : ")[-1]
        self._role = task._role.get_name(include_role_fqcn=False) if task._role else ""
        self._timeline.append((f"{self._role}: {self._task}" if self._role else str(self._task), time.monotonic()))
        if self._raw():
            super().v2_playbook_on_task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_include(self, included_file):
        if self._raw():
            super().v2_playbook_on_include(included_file)

    def v2_playbook_on_no_hosts_remaining(self):
        if self._raw():
            super().v2_playbook_on_no_hosts_remaining()

    # --- results ---
    def v2_runner_on_ok(self, result):
        if self._raw():
            return super().v2_runner_on_ok(result)
        host = result._host.get_name()
        h = self._host(host)
        self._note_step(host)
        # A task's own word for the summary: its stdout lines "hpctrain-note: TEXT".
        for line in str(result._result.get("stdout") or "").splitlines():
            if line.startswith("hpctrain-note: "):
                h["notes"].append(line[len("hpctrain-note: "):])
        if result._result.get("changed", False):
            h["changed"] += 1
            h["changed_tasks"].append(f"{self._role}: {self._task}")
            self._line(host, "would change" if self._check else "changed")
        else:
            h["ok"] += 1
            self._line(host, "ok")
        return None

    def v2_runner_on_skipped(self, result):
        if self._raw():
            return super().v2_runner_on_skipped(result)
        # A step whose tasks are skipped because their result is there already (a rerun) is done;
        # one skipped as a whole (an include for a feature not asked for) is not.
        if "include" not in str(getattr(result._task, "action", "")):
            self._note_step(result._host.get_name())
        return None

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._raw():
            return super().v2_runner_on_failed(result, ignore_errors)
        host = result._host.get_name()
        if ignore_errors:
            self._host(host)["ok"] += 1
            return None
        h = self._host(host)
        problem, fix = split_fix(self._failure_message(result))
        h.update(failed=True, failed_step=self._role, failed_task=self._task, message=problem,
                 fix=fix or "fix what the message says, then run setup again (-v shows Ansible's output)")
        self._line(host, "FAILED")
        self._detail(problem)
        self._detail("fix: " + h["fix"])
        return None

    def v2_runner_on_unreachable(self, result):
        if self._raw():
            return super().v2_runner_on_unreachable(result)
        host = result._host.get_name()
        h = self._host(host)
        raw = " ".join(str(result._result.get("msg", "")).split())
        problem, fix = unreachable_fix(host, raw, self.get_option("ssh_key"))
        h.update(unreachable=True, failed_step=self._role, failed_task=self._task,
                 message=f"{problem} ({raw})", fix=fix)
        self._line(host, "UNREACHABLE")
        self._detail(h["message"])
        self._detail("fix: " + fix)
        return None

    def v2_runner_item_on_failed(self, result):
        if self._raw():
            return super().v2_runner_item_on_failed(result)
        msg = result._result.get("msg") or (result._result.get("stderr") or "").strip()
        self._item_errors[result._host.get_name()] = str(msg)
        return None

    def v2_runner_item_on_ok(self, result):
        if self._raw():
            return super().v2_runner_item_on_ok(result)
        return None

    def v2_runner_item_on_skipped(self, result):
        if self._raw():
            return super().v2_runner_item_on_skipped(result)
        return None

    def v2_runner_retry(self, result):
        if self._raw():
            return super().v2_runner_retry(result)
        return None

    def v2_on_file_diff(self, result):
        if self._raw():
            return super().v2_on_file_diff(result)
        if self.get_option("status_table") or not result._result.get("changed", False):
            return None
        diffs = result._result.get("diff")
        if not diffs:
            return None
        if not isinstance(diffs, list):
            diffs = [diffs]
        host = result._host.get_name()
        for d in diffs:
            text = self._get_diff(d)
            if text and text.strip():
                self._display.display(f"{'':9}{host:<{self._width}}  diff of {self._role}: {self._task}")
                for line in text.rstrip("\n").splitlines():
                    self._display.display(" " * (self._width + 12) + line)
        return None

    # --- the end ---
    def v2_playbook_on_stats(self, stats):
        if self._raw():
            super().v2_playbook_on_stats(stats)
        elapsed = time.monotonic() - self._t0
        for host in sorted(stats.processed.keys()):
            s = stats.summarize(host)
            h = self._host(host)
            h["ok_total"] = s["ok"]
            h["changed_total"] = s["changed"]
        if not self._raw():
            if self.get_option("status_table"):
                self._status_table()
            else:
                self._summary(elapsed)
        path = self.get_option("summary_file")
        if path:
            tasks, steps = self._profile()
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"elapsed_s": round(elapsed, 2), "check_mode": self._check, "hosts": self._hosts,
                           "step_seconds": steps, "task_seconds": tasks}, f, indent=1, sort_keys=True)
            os.replace(path + ".tmp", path)

    def _profile(self):
        """[[task, seconds], ...] in run order, and {step: seconds}: where the run's time went."""
        end = time.monotonic()
        tasks, steps = [], {}
        for i, (name, start) in enumerate(self._timeline):
            took = (self._timeline[i + 1][1] if i + 1 < len(self._timeline) else end) - start
            tasks.append([name, round(took, 2)])
            step = name.split(":", 1)[0] if ":" in name else "other"
            steps[step] = round(steps.get(step, 0) + took, 2)
        return tasks, steps

    def _summary(self, elapsed):
        verb = "would change" if self._check else "changed"
        self._display.display(f"Summary ({elapsed:.1f} s):")
        for host, h in self._hosts.items():
            steps = " ".join(s for s in STEPS if s in h["steps"] and s != h["failed_step"]) or "none"
            if h["unreachable"]:
                state = f"UNREACHABLE at {h['failed_step'] or 'the start'}"
            elif h["failed"]:
                state = f"FAILED at {h['failed_step']}: {h['failed_task']}"
            else:
                state = f"ok, {h['changed']} {verb}"
            self._display.display(f"  {host:<{self._width}}  {state}; steps done: {steps}")
            for note in h["notes"]:
                self._display.display(f"  {'':<{self._width}}  {note}")

    def _status_table(self):
        cols = [s for s in STEPS if any(s in h["steps"] for h in self._hosts.values())]
        self._display.display(f"{'host':<{self._width}}  " + "  ".join(f"{c:<10}" for c in cols))
        for host, h in self._hosts.items():
            cells = []
            for c in cols:
                if h["failed_step"] == c:
                    cells.append("UNREACH" if h["unreachable"] else "FAILED")
                elif c not in h["steps"]:
                    cells.append("-")
                elif any(t.startswith(c + ":") for t in h["changed_tasks"]):
                    cells.append("drift")
                else:
                    cells.append("ok")
            self._display.display(f"{host:<{self._width}}  " + "  ".join(f"{x:<10}" for x in cells))
        for host, h in self._hosts.items():
            for t in h["changed_tasks"]:
                self._display.display(f"  {host}: would change: {t}")
