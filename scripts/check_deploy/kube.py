"""Kubernetes checks: an MPIJob against the MPI Operator's v2beta1 schema
(schemas/mpijob-v2beta1.json), the core kinds the recipes use against the
core API's required fields (below), both with python3-jsonschema; then the
names one object gives another: a volumeMount names a volume of its pod, a
Job's subdomain names a headless Service, a Service's selector matches some
pod's labels, $(VAR) in a container's command or args names one of its env
variables."""

import json
import os
import re

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))

_CONTAINER = {
    "type": "object",
    "required": ["name", "image"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "image": {"type": "string", "minLength": 1},
        "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "ports": {"type": "array", "items": {"type": "object", "required": ["containerPort"]}},
        "volumeMounts": {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}},
    },
}
_POD_SPEC = {
    "type": "object",
    "required": ["containers"],
    "properties": {
        "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
        "initContainers": {"type": "array", "items": _CONTAINER},
        "volumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
    },
}
_META = {"type": "object", "required": ["name"],
         "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"}}}
# Core API required fields (k8s.io/api, v1.29) of the kinds the recipes use.
CORE = {
    ("batch/v1", "Job"): {
        "type": "object", "required": ["metadata", "spec"],
        "properties": {"metadata": _META, "spec": {
            "type": "object", "required": ["template"],
            "properties": {
                "completionMode": {"enum": ["NonIndexed", "Indexed"]},
                "completions": {"type": "integer", "minimum": 0},
                "parallelism": {"type": "integer", "minimum": 0},
                "backoffLimit": {"type": "integer", "minimum": 0},
                "template": {"type": "object", "required": ["spec"], "properties": {
                    "spec": dict(_POD_SPEC, properties=dict(_POD_SPEC["properties"], restartPolicy={
                        "enum": ["OnFailure", "Never"]}), required=["containers", "restartPolicy"])}}},
            "if": {"properties": {"completionMode": {"const": "Indexed"}}, "required": ["completionMode"]},
            "then": {"required": ["completions"]}}}},
    ("v1", "Service"): {
        "type": "object", "required": ["metadata", "spec"],
        "properties": {"metadata": _META, "spec": {"type": "object", "properties": {
            "ports": {"type": "array", "items": {"type": "object", "required": ["port"]}}}}}},
    ("v1", "Secret"): {"type": "object", "required": ["metadata"], "properties": {"metadata": _META}},
    ("v1", "ConfigMap"): {"type": "object", "required": ["metadata"], "properties": {"metadata": _META}},
    ("v1", "PersistentVolumeClaim"): {
        "type": "object", "required": ["metadata", "spec"],
        "properties": {"metadata": _META, "spec": {"type": "object", "required": ["accessModes", "resources"]}}},
}


def is_manifest(doc):
    return isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc


def _line_at(doc, path):
    node, line = doc, getattr(doc, "line", 0)
    for p in path:
        try:
            lines = getattr(node, "lines", None)
            if lines and p in lines:
                line = lines[p]
            node = node[p]
            line = getattr(node, "line", line) or line
        except (KeyError, IndexError, TypeError):
            break
    return line


def _pod_specs(doc):
    """(path, pod spec, pod labels) of every pod template in a manifest."""
    spec = doc.get("spec") or {}
    if doc["kind"] == "MPIJob":
        for role, r in (spec.get("mpiReplicaSpecs") or {}).items():
            t = (r or {}).get("template") or {}
            yield (["spec", "mpiReplicaSpecs", role, "template", "spec"], t.get("spec") or {},
                   ((t.get("metadata") or {}).get("labels") or {}))
    elif doc["kind"] in ("Job", "Deployment", "StatefulSet"):
        t = spec.get("template") or {}
        yield ["spec", "template", "spec"], t.get("spec") or {}, ((t.get("metadata") or {}).get("labels") or {})
    elif doc["kind"] == "Pod":
        yield ["spec"], spec, ((doc.get("metadata") or {}).get("labels") or {})


def check_files(docs_by_file, report):
    """docs_by_file: [(path, [manifest docs])]; names are checked across all of them."""
    mpijob = json.load(open(os.path.join(HERE, "schemas", "mpijob-v2beta1.json")))
    services, pods = {}, []
    for path, docs in docs_by_file:
        for doc in docs:
            kind, api = doc.get("kind"), doc.get("apiVersion")
            name = (doc.get("metadata") or {}).get("name", "?")
            where = f"{kind}/{name}"
            if kind == "MPIJob":
                schema = mpijob
                if api != "kubeflow.org/v2beta1":
                    report.error(path, _line_at(doc, ["apiVersion"]), where,
                                 f"MPIJob apiVersion '{api}' is not kubeflow.org/v2beta1")
                    continue
            else:
                schema = CORE.get((api, kind))
                if schema is None:
                    report.error(path, _line_at(doc, ["kind"]), where,
                                 f"kind '{kind}' of '{api}' is not in the checked set (scripts/check_deploy/kube.py)")
                    continue
            for e in sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path)):
                loc = ".".join(str(p) for p in e.absolute_path)
                report.error(path, _line_at(doc, list(e.absolute_path)), f"{where} {loc}".strip(), e.message)
            if kind == "Service":
                services[name] = (path, doc)
            for ppath, pod, labels in _pod_specs(doc):
                pods.append((path, doc, where, ppath, pod, labels))

    for path, doc, where, ppath, pod, labels in pods:
        volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
        for ci, c in enumerate(pod.get("containers") or []):
            if not isinstance(c, dict):
                continue
            cpath = ppath + ["containers", ci]
            for mi, m in enumerate(c.get("volumeMounts") or []):
                if isinstance(m, dict) and m.get("name") not in volumes:
                    report.error(path, _line_at(doc, cpath + ["volumeMounts", mi, "name"]), where,
                                 f"volumeMount '{m.get('name')}' names no volume of this pod "
                                 f"(volumes: {', '.join(sorted(v for v in volumes if v)) or 'none'})")
            env = {e.get("name") for e in c.get("env") or [] if isinstance(e, dict)}
            for key in ("command", "args"):
                for ai, arg in enumerate(c.get(key) or []):
                    for var in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
                        if var not in env:
                            report.error(path, _line_at(doc, cpath + [key, ai]), where,
                                         f"$({var}) in {key} names no env variable of container "
                                         f"'{c.get('name')}'")
        sub = pod.get("subdomain")
        if sub is not None:
            svc = services.get(sub)
            if svc is None:
                report.error(path, _line_at(doc, ppath + ["subdomain"]), where,
                             f"subdomain '{sub}' names no Service in the checked files")
            elif (svc[1].get("spec") or {}).get("clusterIP") != "None":
                report.error(svc[0], _line_at(svc[1], ["spec"]), f"Service/{sub}",
                             "a pod subdomain needs a headless Service (clusterIP: None)")
    for name, (path, doc) in services.items():
        sel = (doc.get("spec") or {}).get("selector") or {}
        if sel and not any(all(labels.get(k) == v for k, v in sel.items()) for *_, labels in pods):
            report.error(path, _line_at(doc, ["spec", "selector"]), f"Service/{name}",
                         f"selector {dict(sel)} matches no pod template's labels in the checked files")
