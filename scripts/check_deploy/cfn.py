"""CloudFormation checks (cfn-lint is not in Debian): every Ref, Fn::GetAtt and
${...} in Fn::Sub names a defined resource, parameter or pseudo-parameter (and
GetAtt an attribute the type has), every parameter is used, every resource type
is one of cfn_spec.SPEC with its required properties present and no unknown
property, conditions and mappings named by Fn::If/Condition/FindInMap exist."""

import re

import embedded_shell
from cfn_spec import NESTED, PARAMETER_TYPES, PSEUDO_PARAMETERS, RESOURCE_KEYS, SPEC, TOP_LEVEL

SUB_VAR = re.compile(r"\$\{([^}]*)\}")


def is_template(doc):
    return isinstance(doc, dict) and ("AWSTemplateFormatVersion" in doc or (
        isinstance(doc.get("Resources"), dict) and any(
            isinstance(r, dict) and str(r.get("Type", "")).startswith("AWS::")
            for r in doc["Resources"].values())))


def _line(container, key):
    lines = getattr(container, "lines", None)
    if lines and key in lines:
        return lines[key]
    return getattr(container, "line", 0)


def check(path, doc, report, text=""):
    err = lambda line, place, msg: report.error(path, line, place, msg)
    for key in doc:
        if key not in TOP_LEVEL:
            err(_line(doc, key), key, f"unknown top-level section '{key}' (one of {', '.join(sorted(TOP_LEVEL))})")
    params = doc.get("Parameters") or {}
    resources = doc.get("Resources") or {}
    conditions = doc.get("Conditions") or {}
    mappings = doc.get("Mappings") or {}
    if not resources:
        err(0, "Resources", "a template needs at least one resource")
    for name, p in params.items():
        if not isinstance(p, dict) or "Type" not in p:
            err(_line(params, name), f"Parameters.{name}", f"parameter '{name}' has no Type")
            continue
        t = p["Type"]
        if t not in PARAMETER_TYPES and not re.fullmatch(r"AWS::SSM::Parameter::Value<.+>", str(t)):
            err(_line(p, "Type"), f"Parameters.{name}.Type", f"unknown parameter type '{t}'")
        for k in p:
            if k not in {"Type", "Default", "Description", "AllowedValues", "AllowedPattern",
                         "ConstraintDescription", "MinValue", "MaxValue", "MinLength", "MaxLength",
                         "NoEcho"}:
                err(_line(p, k), f"Parameters.{name}.{k}", f"unknown parameter attribute '{k}'")

    used = set()

    def ref_target(name, line, place, what):
        if name in params:
            used.add(name)
        elif name in resources or name in PSEUDO_PARAMETERS:
            pass
        else:
            err(line, place, f"{what} '{name}' names no parameter, resource or pseudo-parameter")

    def getatt(res, attr, line, place):
        if res not in resources:
            err(line, place, f"Fn::GetAtt '{res}.{attr}' names no resource")
            return
        t = resources[res].get("Type") if isinstance(resources[res], dict) else None
        spec = SPEC.get(t)
        if spec is not None and attr not in spec["attrs"]:
            err(line, place, f"Fn::GetAtt '{res}.{attr}': {t} has no attribute '{attr}'"
                f" (it has {', '.join(sorted(spec['attrs'])) or 'none'})")

    def walk(node, place, line):
        if isinstance(node, dict):
            if len(node) == 1:
                (k, v), = node.items()
                here = _line(node, k) or line
                if k == "Ref":
                    if not isinstance(v, str):
                        err(here, place, "Ref takes a name")
                    else:
                        ref_target(v, here, place, "Ref")
                    return
                if k == "Fn::GetAtt":
                    parts = v.split(".", 1) if isinstance(v, str) else list(v) if isinstance(v, list) else []
                    if len(parts) != 2 or not isinstance(parts[0], str):
                        err(here, place, f"Fn::GetAtt takes [Resource, Attribute], got {v!r}")
                    elif isinstance(parts[1], str):
                        getatt(parts[0], parts[1], here, place)
                    return
                if k == "Fn::Sub":
                    text_, local = (v, {}) if isinstance(v, str) else (v[0], v[1]) if (
                        isinstance(v, list) and len(v) == 2 and isinstance(v[1], dict)) else (None, None)
                    if not isinstance(text_, str):
                        err(here, place, "Fn::Sub takes a string or [string, {variables}]")
                        return
                    for lk, lv in local.items():
                        walk(lv, f"{place}.Fn::Sub.{lk}", here)
                    if embedded_shell.is_script(text_):
                        first = embedded_shell.line_of_script(text, text_.split("\n", 1)[0], here)
                        embedded_shell.check(path, embedded_shell.cfn_sub_to_shell(text_), first, place, report)
                    for i, m in enumerate(SUB_VAR.finditer(text_)):
                        var = m.group(1).strip()
                        if var.startswith("!") or var in local:
                            continue
                        sub_line = here + text_.count("\n", 0, m.start()) + (1 if "\n" in text_ else 0)
                        if "." in var and not var.startswith("AWS::"):
                            getatt(*var.split(".", 1), sub_line, f"{place} (Fn::Sub)")
                        else:
                            ref_target(var, sub_line, f"{place} (Fn::Sub)", "${" + var + "} in Fn::Sub")
                    return
                if k in ("Fn::If", "Condition") and isinstance(v, (list, str)):
                    cname = v[0] if isinstance(v, list) and v else v
                    if cname not in conditions:
                        err(here, place, f"{k} names no condition '{cname}'")
                    if isinstance(v, list):
                        for i, item in enumerate(v[1:], 1):
                            walk(item, f"{place}.{k}[{i}]", here)
                    return
                if k == "Fn::FindInMap" and isinstance(v, list) and v:
                    if isinstance(v[0], str) and v[0] not in mappings:
                        err(here, place, f"Fn::FindInMap names no mapping '{v[0]}'")
            for k, v in node.items():
                walk(v, f"{place}.{k}" if place else str(k), _line(node, k) or line)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{place}[{i}]", getattr(node, "line", line) or line)

    for name, r in resources.items():
        place = f"Resources.{name}"
        rline = _line(resources, name)
        if not isinstance(r, dict):
            err(rline, place, "a resource is a mapping with Type and Properties")
            continue
        for k in r:
            if k not in RESOURCE_KEYS:
                err(_line(r, k), f"{place}.{k}", f"unknown resource attribute '{k}'")
        t = r.get("Type")
        spec = SPEC.get(t)
        if spec is None:
            err(_line(r, "Type"), f"{place}.Type",
                f"resource type '{t}' is not in the checked set (scripts/check_deploy/cfn_spec.py)")
            continue
        props = r.get("Properties") or {}
        for req in sorted(spec["required"] - set(props)):
            err(_line(r, "Properties") or rline, f"{place}.Properties",
                f"{t} requires property '{req}', which is missing")
        for k in props:
            if k not in spec["allowed"]:
                err(_line(props, k), f"{place}.Properties.{k}", f"{t} has no property '{k}'")
        for key, (req_n, allowed_n) in NESTED.get(t, {}).items():
            pname = key[:-2] if key.endswith("[]") else key
            value = props.get(pname)
            if value is None:
                continue
            items = value if key.endswith("[]") and isinstance(value, list) else [value]
            for i, item in enumerate(items):
                if not isinstance(item, dict) or (len(item) == 1 and next(iter(item)) in (
                        "Ref", "Fn::If", "Fn::GetAtt", "Fn::Sub", "Fn::Select", "Fn::FindInMap")):
                    continue
                here = f"{place}.Properties.{pname}" + (f"[{i}]" if key.endswith("[]") else "")
                for miss in sorted(req_n - set(item)):
                    err(getattr(item, "line", 0) or _line(props, pname), here,
                        f"{t} {pname} requires '{miss}', which is missing")
                for k in item:
                    if k not in allowed_n:
                        err(_line(item, k), f"{here}.{k}", f"{t} {pname} has no property '{k}'")
        deps = r.get("DependsOn", [])
        for d in [deps] if isinstance(deps, str) else deps:
            if d not in resources:
                err(_line(r, "DependsOn"), f"{place}.DependsOn", f"DependsOn names no resource '{d}'")
        if "Condition" in r and r["Condition"] not in conditions:
            err(_line(r, "Condition"), f"{place}.Condition", f"names no condition '{r['Condition']}'")
        walk(props, f"{place}.Properties", rline)
        for k in ("Metadata", "CreationPolicy"):
            if k in r:
                walk(r[k], f"{place}.{k}", rline)

    for name, c in conditions.items():
        walk(c, f"Conditions.{name}", _line(conditions, name))
    outputs = doc.get("Outputs") or {}
    for name, o in outputs.items():
        if not isinstance(o, dict) or "Value" not in o:
            err(_line(outputs, name), f"Outputs.{name}", f"output '{name}' has no Value")
            continue
        walk(o, f"Outputs.{name}", _line(outputs, name))
    for name in params:
        if name not in used:
            err(_line(params, name), f"Parameters.{name}", f"parameter '{name}' is never used")
