"""An offline renderer for the subset of kustomize that k8s/ uses.

The kustomize and kubectl binaries cannot be fetched where the tests run, so this renders the
overlays the same way for the features the manifests rely on: ``resources`` (files and
directories), ``namespace``, ``labels`` (with ``includeTemplates``), ``configMapGenerator``
(``envs``, ``files``, ``literals``, ``behavior: merge``; content-hash name suffix and the
references to it), ``patches`` (strategic merge by the Kubernetes merge keys) and ``images``.
Anything else in a kustomization is an error, so a manifest change that needs more is noticed
here instead of being silently ignored.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "configMapGenerator", "patches", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition", "PriorityClass"}
# patchMergeKey of the lists the patches touch (from the Kubernetes API types)
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
    "volumeMounts": "mountPath", "topologySpreadConstraints": "topologyKey", "imagePullSecrets": "name",
}
_GENERATED = "__generated_name__"


class KustomizeError(ValueError):
    pass


def _load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _parse_env_file(path: Path) -> dict[str, str]:
    data: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise KustomizeError(f"{path}:{n}: expected KEY=VALUE")
        key, value = line.split("=", 1)
        data[key.strip()] = value
    return data


def _inside(root: Path, rel: str) -> Path:
    """kustomize's load restrictor: generator files must live under the kustomization root."""
    p = (root / rel).resolve()
    if root.resolve() not in p.parents and p != root.resolve():
        raise KustomizeError(f"{rel}: outside the kustomization root {root}")
    return p


def _generate_configmap(root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, str] = {}
    for env in spec.get("envs", []):
        data.update(_parse_env_file(_inside(root, env)))
    for f in spec.get("files", []):
        key, _, rel = f.partition("=") if "=" in f else (Path(f).name, "", f)
        data[key] = _inside(root, rel).read_text(encoding="utf-8")
    for lit in spec.get("literals", []):
        key, sep, value = lit.partition("=")
        if not sep:
            raise KustomizeError(f"literal {lit!r}: expected KEY=VALUE")
        data[key] = value
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": spec["name"]}, "data": data,
            _GENERATED: spec["name"]}


def strategic_merge(base: Any, patch: Any) -> Any:
    """Merge ``patch`` into ``base`` in place: maps recursively, known lists by merge key, ``null`` deletes."""
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            strategic_merge(base[key], value)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(base.get(key), list):
            mk = MERGE_KEYS[key]
            for item in value:
                match = next((b for b in base[key] if b.get(mk) == item.get(mk)), None)
                if match is None:
                    base[key].append(copy.deepcopy(item))
                else:
                    strategic_merge(match, item)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for o in objs:
        if o["kind"] == kind and o.get(_GENERATED, o["metadata"]["name"]) == name:
            return o
    raise KustomizeError(f"patch target {kind}/{name} not found")


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if "template" in spec:
        return [spec["template"]["spec"]]
    return []


def _template_metas(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        jt = spec["jobTemplate"]
        return [jt.setdefault("metadata", {}), jt["spec"]["template"].setdefault("metadata", {})]
    if "template" in spec:
        return [spec["template"].setdefault("metadata", {})]
    return []


def _set_image(objs: list[dict[str, Any]], rule: dict[str, Any]) -> None:
    for obj in objs:
        for pod in _pod_specs(obj):
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                image = c["image"]
                name = image.split("@")[0]
                if ":" in name.rsplit("/", 1)[-1]:
                    name = name.rsplit(":", 1)[0]
                if name == rule["name"]:
                    c["image"] = f"{rule.get('newName', name)}:{rule['newTag']}" if "newTag" in rule \
                        else rule.get("newName", name)


def _build(root: Path) -> list[dict[str, Any]]:
    kfile = root / "kustomization.yaml"
    k = yaml.safe_load(kfile.read_text(encoding="utf-8"))
    unknown = set(k) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{kfile}: fields this renderer does not support: {sorted(unknown)}")
    objs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        p = (root / res).resolve()
        objs.extend(_build(p) if p.is_dir() else _load_yaml_docs(p))
    for gen in k.get("configMapGenerator", []):
        made = _generate_configmap(root, gen)
        behavior = gen.get("behavior", "create")
        if behavior == "create":
            objs.append(made)
        elif behavior in ("merge", "replace"):
            target = _find(objs, "ConfigMap", gen["name"])
            if behavior == "replace":
                target["data"] = {}
            target.setdefault("data", {}).update(made["data"])
        else:
            raise KustomizeError(f"configMapGenerator behavior {behavior!r}")
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"only file patches (path:) are supported, got {patch}")
        for doc in _load_yaml_docs(root / patch["path"]):
            strategic_merge(_find(objs, doc["kind"], doc["metadata"]["name"]),
                            {k2: v for k2, v in doc.items() if k2 not in ("apiVersion", "kind")})
    if "namespace" in k:
        for obj in objs:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    for rule in k.get("labels", []):
        if rule.get("includeSelectors"):
            raise KustomizeError("labels with includeSelectors are not supported (selectors are immutable)")
        for obj in objs:
            obj["metadata"].setdefault("labels", {}).update(rule["pairs"])
            if rule.get("includeTemplates"):
                for meta in _template_metas(obj):
                    meta.setdefault("labels", {}).update(rule["pairs"])
    for rule in k.get("images", []):
        _set_image(objs, rule)
    return objs


def _rename_refs(node: Any, renames: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("configMapRef", "configMapKeyRef", "configMap") and isinstance(value, dict) \
                    and value.get("name") in renames:
                value["name"] = renames[value["name"]]
            else:
                _rename_refs(value, renames)
    elif isinstance(node, list):
        for item in node:
            _rename_refs(item, renames)


def render(overlay: str | Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize <overlay>`` would print (for the supported subset)."""
    objs = _build(Path(overlay))
    renames: dict[str, str] = {}
    for obj in objs:
        original = obj.pop(_GENERATED, None)
        if original is not None:
            digest = hashlib.sha256(json.dumps(obj["data"], sort_keys=True).encode()).hexdigest()[:10]
            obj["metadata"]["name"] = renames[original] = f"{original}-{digest}"
    _rename_refs(objs, renames)
    return objs
