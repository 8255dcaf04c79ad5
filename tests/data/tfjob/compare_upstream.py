"""Compare kubeflow.org_tfjobs.json here with an upstream kubeflow.org_tfjobs.yaml, descriptions aside.

    python tests/data/tfjob/compare_upstream.py path/to/kubeflow.org_tfjobs.yaml

The JSON here was transcribed without network access; this is how anyone with the upstream file checks
it. Prints "identical" (exit 0) or the paths that differ (exit 1).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).with_name("kubeflow.org_tfjobs.json")


def without_descriptions(node):
    """The document with every schema `description` (a string) removed: documentation, not validation."""
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def differences(ours, theirs, path="") -> list[str]:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in sorted(set(ours) | set(theirs)):
            where = f"{path}.{key}"
            if key not in theirs:
                found.append(f"{where}: only here")
            elif key not in ours:
                found.append(f"{where}: only upstream")
            else:
                found += differences(ours[key], theirs[key], where)
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [f"{path}: {json.dumps(ours)[:80]} here, {json.dumps(theirs)[:80]} upstream"]


def compare(upstream_yaml: str | Path, ours: str | Path = HERE) -> list[str]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the upstream file is 540 KB
    documents = [d for d in yaml.load_all(Path(upstream_yaml).read_text(), Loader=loader) if d]
    return differences(json.loads(Path(ours).read_text()), without_descriptions(documents[0]))


if __name__ == "__main__":
    found = compare(sys.argv[1])
    print("\n".join(found) if found else "identical")
    sys.exit(1 if found else 0)
