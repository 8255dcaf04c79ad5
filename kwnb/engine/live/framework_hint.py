"""One line for a TensorFlow run (the default --framework) whose script is written for Keras 3 across
processes on JAX: it calls `keras.distribution`, or imports keras where KERAS_BACKEND=jax. Under TensorFlow
its tasks get TF_CONFIG and tf-keras, not the KERAS_DISTRIBUTION_* variables keras.distribution.initialize()
reads, so each would train alone. The script is read with `ast`, never run."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Mapping

from ... import python_source


def uses_keras_distribution(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "distribution" and \
                isinstance(node.value, ast.Name) and node.value.id == "keras":
            return True
        if isinstance(node, ast.ImportFrom) and node.module and (node.module.startswith("keras.distribution") or (
                node.module == "keras" and any(alias.name == "distribution" for alias in node.names))):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("keras.distribution") for a in node.names):
            return True
    return False


def imports_keras(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Import) and any(a.name.split(".")[0] == "keras" for a in node.names) or
               isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "keras"
               for node in ast.walk(tree))


def framework_hint(script: Path, framework: str, env: Mapping[str, str]) -> str:
    """The hint, or "" (another framework, a script that cannot be parsed, or one not written for JAX)."""
    if framework != "tensorflow":
        return ""
    tree = python_source.parse_file(script)
    if tree is None:
        return ""
    if uses_keras_distribution(tree):
        why = "calls keras.distribution"
    elif env.get("KERAS_BACKEND") == "jax" and imports_keras(tree):
        why = "imports keras with KERAS_BACKEND=jax"
    else:
        return ""
    return (f"{script.name} {why}, Keras 3 across processes on JAX: add --framework jax, which gives each task the "
            f"KERAS_DISTRIBUTION_* variables keras.distribution.initialize() reads (TensorFlow's tasks get TF_CONFIG)")
