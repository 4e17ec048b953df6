"""Terraform checks: every .tf file is parsed by HashiCorp's HCL parser
(@cdktf/hcl2json from npm, run by tf_refs.js under node), then, per module
directory, every var., local., resource, data and module reference must be
declared, every variable used, and the resources of the listed google types
must carry their required arguments and no unknown one."""

import json
import os
import re
import subprocess
from collections import defaultdict

import embedded_shell

# Required and accepted arguments (and nested blocks) of the google provider's
# resources the recipes use, from the provider's documentation
# (registry.terraform.io/providers/hashicorp/google, v5).
META = {"count", "for_each", "depends_on", "provider", "lifecycle", "dynamic"}
GOOGLE = {
    "google_compute_network": ({"name"}, {"name", "auto_create_subnetworks", "mtu", "routing_mode",
                                          "description", "project", "delete_default_routes_on_create"}),
    "google_compute_subnetwork": ({"name", "ip_cidr_range", "network"},
                                  {"name", "ip_cidr_range", "network", "region", "project", "description",
                                   "private_ip_google_access", "secondary_ip_range", "stack_type"}),
    "google_compute_firewall": ({"name", "network"},
                                {"name", "network", "allow", "deny", "source_ranges", "source_tags",
                                 "target_tags", "direction", "priority", "description", "project",
                                 "destination_ranges", "source_service_accounts", "disabled"}),
    "google_compute_router": ({"name", "network"}, {"name", "network", "region", "project", "bgp",
                                                     "description"}),
    "google_compute_router_nat": ({"name", "router", "nat_ip_allocate_option",
                                   "source_subnetwork_ip_ranges_to_nat"},
                                  {"name", "router", "region", "project", "nat_ip_allocate_option",
                                   "source_subnetwork_ip_ranges_to_nat", "nat_ips", "subnetwork",
                                   "log_config", "min_ports_per_vm"}),
    "google_compute_instance": ({"name", "machine_type", "boot_disk", "network_interface"},
                                {"name", "machine_type", "zone", "boot_disk", "network_interface",
                                 "guest_accelerator", "scheduling", "metadata", "metadata_startup_script",
                                 "tags", "labels", "service_account", "allow_stopping_for_update",
                                 "resource_policies", "hostname", "description", "project",
                                 "min_cpu_platform", "attached_disk", "scratch_disk",
                                 "shielded_instance_config", "deletion_protection", "can_ip_forward"}),
    "google_compute_resource_policy": ({"name"}, {"name", "region", "project", "description",
                                                  "group_placement_policy", "snapshot_schedule_policy",
                                                  "instance_schedule_policy"}),
    "google_filestore_instance": ({"name", "tier", "file_shares", "networks"},
                                  {"name", "tier", "file_shares", "networks", "location", "zone",
                                   "project", "description", "labels", "kms_key_name"}),
}
BLOCK_KEYS = {
    "variable": {"type", "default", "description", "validation", "sensitive", "nullable"},
    "output": {"value", "description", "sensitive", "depends_on"},
}
# Roots a reference may start with that are not declarations.
BUILTIN_ROOTS = {"count", "each", "self", "path", "terraform"}

NODE_CACHE = os.environ.get("HPCT_HCL2JSON_DIR", "/var/cache/hpctrain/hcl2json")
HCL2JSON_VERSION = "0.21.0"


def ensure_parser(report):
    """The node_modules holding @cdktf/hcl2json, installed once into a cache
    folder; None (with a note saying why) when npm cannot fetch it."""
    mods = os.path.join(NODE_CACHE, "node_modules")
    if os.path.isfile(os.path.join(mods, "@cdktf", "hcl2json", "package.json")):
        return mods
    if subprocess.run(["sh", "-c", "command -v node && command -v npm"], capture_output=True).returncode:
        report.note("terraform: SKIPPED: node and npm are not installed (apt-get install nodejs npm)")
        return None
    os.makedirs(NODE_CACHE, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", NODE_CACHE, "--no-audit", "--no-fund",
                            f"@cdktf/hcl2json@{HCL2JSON_VERSION}"], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        r = None
    if r is None or r.returncode != 0:
        lines = [] if r is None else r.stderr.strip().splitlines()
        named = [ln for ln in lines if re.search(r"E[A-Z]{4,}|code|network|registry", ln)]
        why = "timed out after 180 s" if r is None else ((named or lines or ["?"])[0])
        report.note(f"terraform: SKIPPED: npm could not install @cdktf/hcl2json ({why}); "
                    "the HCL files were not checked")
        return None
    return mods


def _line_of(text, needle):
    i = text.find(needle)
    return text.count("\n", 0, i) + 1 if i >= 0 else 0


def _line_after(text, start, key):
    """The line of argument or block `key` after the line holding `start`."""
    i = text.find(start)
    if i < 0:
        return 0
    m = re.compile(r"^\s*" + re.escape(key) + r"\b", re.M).search(text, i)
    return text.count("\n", 0, m.start()) + 1 if m else text.count("\n", 0, i) + 1


def check_modules(modules, report):
    """modules: {folder: [.tf files]}; one parser run for all, then each folder alone."""
    mods = ensure_parser(report)
    if mods is None or not modules:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    every = [f for files in modules.values() for f in files]
    try:
        r = subprocess.run(["node", os.path.join(here, "tf_refs.js"), *every], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "NODE_PATH": mods})
    except subprocess.TimeoutExpired:
        report.error(every[0], 0, "", "the HCL parser did not finish within 300 s")
        return
    if r.returncode != 0:
        report.error(every[0], 0, "", f"the HCL parser failed: {r.stderr.strip()[-400:]}")
        return
    parsed = json.loads(r.stdout)
    for _, files in sorted(modules.items()):
        check_module(files, parsed, report)


def check_module(files, parsed, report):
    texts = {f: open(f, encoding="utf-8").read() for f in files}
    declared = defaultdict(set)  # kind -> names; kind: var, local, resource, data, module
    where = {}
    used_vars = set()
    for f in files:
        res = parsed[f]
        if "error" in res:
            m = re.search(r":(\d+),\d+", res["error"])
            report.error(f, int(m.group(1)) if m else 0, "", f"HCL does not parse: {res['error']}")
            continue
        body = res["body"]
        for name in body.get("variable", {}):
            declared["var"].add(name)
            where[("var", name)] = (f, _line_of(texts[f], f'variable "{name}"'))
        for block in body.get("locals", []):
            declared["local"].update(block)
        for rtype, named in body.get("resource", {}).items():
            for name, blocks in named.items():
                declared["resource"].add(f"{rtype}.{name}")
                spec = GOOGLE.get(rtype)
                line = _line_of(texts[f], f'resource "{rtype}" "{name}"')
                if spec is None:
                    report.error(f, line, f"resource.{rtype}.{name}",
                                 f"resource type '{rtype}' is not in the checked set (scripts/check_deploy/terraform.py)")
                    continue
                required, allowed = spec
                for block in blocks:
                    script = block.get("metadata_startup_script")
                    if embedded_shell.is_script(script):
                        first = embedded_shell.line_of_script(texts[f], script.split("\n", 1)[0], line)
                        embedded_shell.check(f, embedded_shell.tf_template_to_shell(script), first,
                                             f"resource.{rtype}.{name}.metadata_startup_script", report)
                    for req in sorted(required - set(block)):
                        report.error(f, line, f"resource.{rtype}.{name}",
                                     f"{rtype} requires argument '{req}', which is missing")
                    for k in block:
                        if k not in allowed and k not in META:
                            report.error(f, _line_after(texts[f], f'resource "{rtype}" "{name}"', k),
                                         f"resource.{rtype}.{name}.{k}", f"{rtype} has no argument '{k}'")
        for dtype, named in body.get("data", {}).items():
            for name in named:
                declared["data"].add(f"{dtype}.{name}")
        for name in body.get("module", {}):
            declared["module"].add(name)
        for kind, keys in BLOCK_KEYS.items():
            for name, blocks in body.get(kind, {}).items():
                for block in blocks:
                    for k in block:
                        if k not in keys:
                            report.error(f, _line_of(texts[f], f'{kind} "{name}"'), f"{kind}.{name}.{k}",
                                         f"a {kind} block has no argument '{k}'")
    if any("error" in parsed[f] for f in files):
        return  # as terraform does: names are checked once every file parses
    for f in files:
        res = parsed[f]
        body = res["body"]
        # Iterators of dynamic blocks (their label, or their `iterator`) are local names.
        iterators = set(re.findall(r'dynamic\s+"([A-Za-z0-9_-]+)"', texts[f]))
        iterators |= set(re.findall(r'\biterator\s*=\s*([A-Za-z0-9_]+)', texts[f]))
        for item in res["refs"]:
            ref, place = item["ref"], item["place"]
            if ref is None:
                report.error(f, 0, place, f"expression does not parse: {item.get('error')}")
                continue
            # A variable's type is a type constraint (string, list(number)), not an expression.
            if re.fullmatch(r"variable\.[^.]+\.type", place):
                continue
            parts = ref.split(".")
            root = parts[0]
            line = _line_of(texts[f], ref)
            if root == "var":
                used_vars.add(parts[1] if len(parts) > 1 else "")
                if len(parts) < 2 or parts[1] not in declared["var"]:
                    report.error(f, line, place, f"'{ref}' names no declared variable")
            elif root == "local":
                if len(parts) < 2 or parts[1] not in declared["local"]:
                    report.error(f, line, place, f"'{ref}' names no declared local value")
            elif root == "data":
                if ".".join(parts[1:3]) not in declared["data"]:
                    report.error(f, line, place, f"'{ref}' names no declared data source")
            elif root == "module":
                if len(parts) < 2 or parts[1] not in declared["module"]:
                    report.error(f, line, place, f"'{ref}' names no declared module")
            elif root in BUILTIN_ROOTS or root in iterators:
                pass
            elif ".".join(parts[:2]) not in declared["resource"]:
                report.error(f, line, place, f"'{ref}' names no declared resource")
    for name in sorted(declared["var"] - used_vars):
        f, line = where[("var", name)]
        report.error(f, line, f"variable.{name}", f"variable '{name}' is never used")
