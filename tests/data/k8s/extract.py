"""Extract the Job, Service and ConfigMap JSON schemas of some Kubernetes versions from a kubernetes-validate wheel.

    pip download --no-deps -d /tmp/kv kubernetes-validate==1.37.0
    python tests/data/k8s/extract.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl

Writes tests/data/k8s/<version>/<kind>.json: each the package's "local-strict" schema of that kind, with
the definitions it reaches (its $ref closure) copied under its own $defs, so that no reference leaves
the file, and without `description` strings (documentation, not validation). Nothing else changes.
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).parent
VERSIONS = ("v1.26.0", "v1.37.0")
KINDS = ("job-batch-v1", "service-v1", "configmap-v1")
ROOT = "kubernetes_validate/kubernetes-json-schema"
SHARED_REF = "/api/_definitions.json#/$defs/"  # how a kind's file points into the shared definitions
LOCAL_REF = "#/$defs/"


def without_descriptions(node):
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def refs(node):
    """Every $ref string in a schema, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def localized(node):
    """The schema with references into the shared definitions turned into references to its own $defs."""
    if isinstance(node, dict):
        return {k: (LOCAL_REF + v[len(SHARED_REF):] if k == "$ref" and isinstance(v, str) and v.startswith(SHARED_REF)
                    else localized(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [localized(v) for v in node]
    return node


def self_contained(root: dict, definitions: dict) -> dict:
    """`root` plus the definitions it reaches, under its own $defs."""
    closure, todo = {}, list(refs(root))
    while todo:
        ref = todo.pop()
        name = ref.rsplit("/", 1)[-1]
        if ref.startswith((SHARED_REF, LOCAL_REF)) and name not in closure:
            closure[name] = definitions[name]
            todo += refs(closure[name])
        elif not ref.startswith((SHARED_REF, LOCAL_REF)):
            raise ValueError(f"unexpected reference {ref!r}")
    schema = localized(without_descriptions(root))
    schema["$defs"] = {name: localized(without_descriptions(closure[name])) for name in sorted(closure)}
    return schema


def extract(wheel: str | Path, out: Path = HERE, versions=VERSIONS, kinds=KINDS) -> list[Path]:
    written = []
    with zipfile.ZipFile(wheel) as archive:
        for version in versions:
            folder = f"{ROOT}/{version}-local-strict"
            definitions = json.loads(archive.read(f"{folder}/_definitions.json"))["$defs"]
            (out / version).mkdir(parents=True, exist_ok=True)
            for kind in kinds:
                schema = self_contained(json.loads(archive.read(f"{folder}/{kind}.json")), definitions)
                target = out / version / f"{kind}.json"
                target.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
                written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for path in extract(sys.argv[1]):
        print(path)
