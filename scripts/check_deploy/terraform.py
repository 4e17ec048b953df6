"""Terraform checks: every .tf file is parsed by python-hcl2 (tf_parse.py,
run by the python of the test tools environment that scripts/install-deps.sh
makes: HPCT_TEST_TOOLS_ENV, default /var/cache/hpctrain/test-tools-1), then,
per module directory: the top-level block types and their labels are
Terraform's; each variable, local, resource, data source, module and output
is declared once; every var., local., resource, data. and module. reference
(in arguments, ${...} and %{...} of strings and heredocs) names a declaration;
every variable is used; variable and output blocks hold only their arguments;
modules have a source; the resources of the listed google types carry their
required arguments and no unknown one (dynamic blocks included); startup
scripts pass shellcheck."""

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

# Top-level block types of Terraform (1.3 and later) and how many labels each takes.
TOP_BLOCKS = {"terraform": 0, "provider": 1, "variable": 1, "locals": 0, "output": 1, "module": 1,
              "resource": 2, "data": 2, "moved": 0, "import": 0, "removed": 0, "check": 1, "ephemeral": 2}
TOOLS_ENV = os.environ.get("HPCT_TEST_TOOLS_ENV") or "/var/cache/hpctrain/test-tools-1"
PARSE_TIMEOUT_S = 300


class ParserUnavailable(Exception):
    """python-hcl2 cannot run: the check cannot be made (not a finding in the recipes)."""


def parse_files(files):
    """{file: tf_parse.py's result} for every file, from one run of the tools
    environment's python; raises ParserUnavailable when that run fails."""
    python = os.path.join(TOOLS_ENV, "bin", "python3")
    if not os.access(python, os.X_OK):
        raise ParserUnavailable(
            f"terraform: {python} is missing, so python-hcl2 cannot parse the .tf files: run scripts/install-deps.sh "
            f"(it makes that environment), or set HPCT_TEST_TOOLS_ENV to an environment that has python-hcl2 7")
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        # -I: nothing from the caller's PYTHON* settings; -B: no __pycache__ in the source tree.
        r = subprocess.run([python, "-I", "-B", os.path.join(here, "tf_parse.py"), *files], capture_output=True,
                           text=True, timeout=PARSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ParserUnavailable(f"terraform: the HCL parser did not finish within {PARSE_TIMEOUT_S} s")
    if r.returncode == 3:
        raise ParserUnavailable(f"terraform: {r.stderr.strip()}")
    if r.returncode != 0:
        raise ParserUnavailable(f"terraform: the HCL parser ({python} tf_parse.py) failed: {r.stderr.strip()[-600:]}")
    return json.loads(r.stdout)


def check_modules(modules, report):
    """modules: {folder: [.tf files]}; one parser run for all, then each folder
    alone. Raises ParserUnavailable when python-hcl2 cannot run."""
    if not modules:
        return
    parsed = parse_files([f for files in modules.values() for f in files])
    for _, files in sorted(modules.items()):
        check_module(files, parsed, report)


def _keys(block):
    """A block's argument and nested block names, each with its line; a
    dynamic block counts as the block it makes."""
    keys = [(k, a["line"]) for k, a in block["attrs"].items()]
    for b in block["blocks"]:
        keys.append((b["type"], b["line"]))
        if b["type"] == "dynamic" and b["labels"]:
            keys.append((b["labels"][0], b["line"]))
    return keys


def check_module(files, parsed, report):
    declared = defaultdict(dict)  # kind -> {name: (file, line)}; kind: var, local, resource, data, module, output
    used_vars = set()

    def declare(kind, name, f, line, place):
        if name in declared[kind]:
            first = declared[kind][name]
            report.error(f, line, place, f"{place} is already declared at {first[0]}:{first[1]}")
        else:
            declared[kind][name] = (f, line)

    for f in files:
        res = parsed[f]
        if "error" in res:
            report.error(f, res["line"], "", f"HCL does not parse: {res['error']}")
            continue
        for name, attr in res["attrs"].items():
            report.error(f, attr["line"], name, f"Terraform has no top-level argument '{name}'")
        for block in res["blocks"]:
            check_block(f, block, declare, report)
    if any("error" in parsed[f] for f in files):
        return  # as terraform does: names are checked once every file parses
    for f in files:
        for item in parsed[f]["refs"]:
            ref, place, line = item["ref"], item["place"], item["line"]
            if ref is None:
                report.error(f, line, place, f"expression does not parse: {item.get('error')}")
                continue
            # A variable's type is a type constraint (string, list(number)), not an expression.
            if re.fullmatch(r"variable\.[^.]+\.type", place):
                continue
            parts = item["parts"]
            root = parts[0]
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
            elif root in BUILTIN_ROOTS:
                pass
            elif ".".join(parts[:2]) not in declared["resource"]:
                report.error(f, line, place, f"'{ref}' names no declared resource")
    for name in sorted(set(declared["var"]) - used_vars):
        f, line = declared["var"][name]
        report.error(f, line, f"variable.{name}", f"variable '{name}' is never used")


def check_block(f, block, declare, report):
    """One top-level block of file f: its type and labels, what it declares, its arguments."""
    kind, labels, line = block["type"], block["labels"], block["line"]
    place = ".".join([kind, *labels])
    if kind not in TOP_BLOCKS:
        report.error(f, line, place, f"Terraform has no top-level block type '{kind}'")
        return
    if len(labels) != TOP_BLOCKS[kind]:
        report.error(f, line, place, f"a {kind} block takes {TOP_BLOCKS[kind]} label(s), not {len(labels)}")
        return
    if kind == "variable":
        declare("var", labels[0], f, line, place)
    elif kind == "locals":
        for name, attr in block["attrs"].items():
            declare("local", name, f, attr["line"], f"local.{name}")
    elif kind == "output":
        declare("output", labels[0], f, line, place)
    elif kind == "module":
        declare("module", labels[0], f, line, place)
        if "source" not in block["attrs"]:
            report.error(f, line, place, "a module block requires argument 'source', which is missing")
    elif kind == "data":
        declare("data", ".".join(labels), f, line, place)
    elif kind == "resource":
        declare("resource", ".".join(labels), f, line, place)
        check_resource(f, block, report)
    for k, k_line in _keys(block) if kind in BLOCK_KEYS else []:
        if k not in BLOCK_KEYS[kind]:
            report.error(f, k_line, f"{place}.{k}", f"a {kind} block has no argument '{k}'")


def check_resource(f, block, report):
    (rtype, name), line = block["labels"], block["line"]
    place = f"resource.{rtype}.{name}"
    spec = GOOGLE.get(rtype)
    if spec is None:
        report.error(f, line, place,
                     f"resource type '{rtype}' is not in the checked set (scripts/check_deploy/terraform.py)")
        return
    required, allowed = spec
    keys = _keys(block)
    for req in sorted(required - {k for k, _ in keys}):
        report.error(f, line, place, f"{rtype} requires argument '{req}', which is missing")
    for k, k_line in keys:
        if k not in allowed and k not in META:
            report.error(f, k_line, f"{place}.{k}", f"{rtype} has no argument '{k}'")
    script = block["attrs"].get("metadata_startup_script")
    if script and embedded_shell.is_script(script["text"]):
        embedded_shell.check(f, embedded_shell.tf_template_to_shell(script["text"]), script["text_line"],
                             f"{place}.metadata_startup_script", report)
