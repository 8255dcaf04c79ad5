"""Kubernetes pieces every export shares: the container's command, environment and resources, the
ConfigMap with the job's files and its mounts, the checks Kubernetes applies to names and quantities,
and the YAML. A target (tfjob.py, job.py) assembles them into its own kinds of object.
"""
from __future__ import annotations

import copy
import os
import re
import shlex
from pathlib import Path

import yaml

from ..errors import OptionError
from ..machine.sizes import format_size
from ..machine.task_env import (CLUSTER_VARIABLES, FRAMEWORK_NAMES, JAX, TENSORFLOW, Framework, framework_named,
                                pod_environment)
from ..task.runfolder import RunDescription

CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses a ConfigMap whose data add up to more
DEFAULT_WORKDIR = "/kwnb/job"
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# What the image must hold for a run of each --framework: (in words, the packages whose versions here it names).
# JAX: its CPU collectives (gloo) are on by default from jax 0.5.1, and keras.distribution.initialize() reads the
# KERAS_DISTRIBUTION_* variables from Keras 3.8 (pyproject.toml's jax extra).
IMAGE_NEEDS = {TENSORFLOW.name: ("Python, TensorFlow and tf-keras of the same minor version",
                                 ("tensorflow", "tf-keras")),
               JAX.name: ("Python, jax 0.5.1 or newer and keras 3.8 or newer, and TensorFlow only if the script "
                          "imports it (e.g. for tf.data)", ("jax", "keras"))}
QUANTITY = re.compile(r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?")


def derive_name(given: str | None, run_name: str, limit: int) -> str:
    """--job-name, or one made from the run's name: a DNS-1035 label (Service and TFJob names must be)
    of at most `limit` characters, so that the names Kubernetes derives from it stay within 63."""
    if given is not None:
        if len(given) > limit or not DNS_1035_LABEL.fullmatch(given):
            raise OptionError(f"--job-name must be lowercase letters, digits and '-', start with a letter, end with a "
                             f"letter or digit, and have at most {limit} characters here, not {given!r}")
        return given
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", run_name.lower())).strip("-")
    if not name[:1].isalpha():
        name = f"kwnb-{name}".rstrip("-")
    return name[:limit].rstrip("-")


def check_namespace(namespace: str | None) -> None:
    if namespace is not None and (len(namespace) > 63 or not DNS_1123_LABEL.fullmatch(namespace)):
        raise OptionError(f"--namespace must be a DNS-1123 label (lowercase letters, digits, '-'), not {namespace!r}")


def check_workdir(workdir: str) -> str:
    if not workdir.startswith("/") or ":" in workdir or not workdir.strip("/"):
        raise OptionError(f"--workdir must be an absolute path (not /) without ':', not {workdir!r}")
    return workdir.rstrip("/")


def run_framework(run: RunDescription) -> Framework:
    if run.framework not in FRAMEWORK_NAMES:
        raise OptionError(f"{run.dir} is a --framework {run.framework} run, which this kwnb does not know "
                          f"(only {', '.join(FRAMEWORK_NAMES)})")
    return framework_named(run.framework)


def environment(run: RunDescription, who_sets_cluster: str, gpus_per_pod: int = 0) -> tuple[dict[str, str], list[str]]:
    """The container's environment (kwnb's variables for every pod of the run's framework, then the run's own:
    machine/task_env.py) and what to tell the user about it."""
    env, notes = pod_environment(run.env, run_framework(run), gpus=gpus_per_pod > 0), []
    notes += [f"left out the run's {name}: {who_sets_cluster} gives each pod its own"
              for name in run.env if name in CLUSTER_VARIABLES]
    kept = [name for name in run.env if name not in CLUSTER_VARIABLES]
    if kept:
        notes.append(f"the manifest sets the run's environment variables {', '.join(kept)} in plain text; "
                     f"keep secrets in a Kubernetes Secret instead")
    return env, notes


def mount_files(container: dict, pod_spec: dict, files: dict, workdir: str, places: dict[str, str] | None = None,
                scratch: bool = True) -> None:
    """Mount each file of the ConfigMap read-only, at places[key] or else into the working directory,
    which is itself a writable scratch folder (relative checkpoint paths must work) unless scratch=False
    (--no-files: the image's own files are there, and an emptyDir would hide them)."""
    places = places or {}
    container["volumeMounts"] = ([{"name": "workdir", "mountPath": workdir}] if scratch else []) + [
        {"name": "job-files", "mountPath": places.get(key, f"{workdir}/{key}"), "subPath": key, "readOnly": True}
        for key in (*files.get("data", {}), *files.get("binaryData", {}))]
    pod_spec["volumes"] = ([{"name": "workdir", "emptyDir": {}}] if scratch else []) + [
        {"name": "job-files", "configMap": {"name": files["metadata"]["name"]}}]


def check_image(image: str | None, framework: str = TENSORFLOW.name) -> None:
    if image and not any(c.isspace() for c in image):
        return
    needs, packages = IMAGE_NEEDS[framework]
    versions = local_versions(packages)
    problem = "--image is required" if not image else f"--image must be an image reference, not {image!r}"
    if framework == JAX.name:
        pins = (" ".join(f"{package}=={version}" for package, version in zip(packages, versions)) + " (as here)"
                if versions else " ".join(packages))
        raise OptionError(f"{problem}: an image with {needs}, e.g. one built FROM python:3.12-slim that runs pip "
                         f"install {pins} and whatever else the script imports; push it and pass --image "
                         f"REGISTRY/NAME:TAG")
    pins = (f"tensorflow=={versions[0]} and tf-keras=={versions[1]}, as here" if versions
            else "tensorflow==2.21.* and tf-keras==2.21.*")
    raise OptionError(f"{problem}: an image with {needs} "
                     f"(e.g. {pins}), plus whatever the script imports. No public image pins both: build one "
                     f"that runs pip install -r binder/requirements.txt in a copy of the kwnb repository (that "
                     f"installs kwnb too), push it, and pass --image REGISTRY/NAME:TAG")


def local_versions(packages: tuple[str, ...]) -> tuple[str, ...] | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return tuple(version(package) for package in packages)
    except PackageNotFoundError:
        return None


def container_command(command: str | list[str] | None, run: RunDescription) -> dict:
    if command is None:
        return {"command": ["python", run.script], **({"args": list(run.args)} if run.args else {})}
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as error:
        raise OptionError(f"--command: {error}") from None
    if not words:
        raise OptionError("--command is empty")
    return {"command": words}


def resources(cpu: str | None, memory: str | None, gpus: int) -> dict:
    for label, value in (("--cpu", cpu), ("--memory", memory)):
        if value is not None and not QUANTITY.fullmatch(value):
            raise OptionError(f"{label} must be a Kubernetes quantity such as 2, 500m or 4Gi, not {value!r}")
    if gpus < 0:
        raise OptionError(f"--gpus-per-pod must be 0 or more, not {gpus}")
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    limits = {**({"memory": memory} if memory else {}), **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def configmap(run: RunDescription, name: str, metadata: dict, *, run_files: bool = True,
              extra: dict[str, str] | None = None) -> dict:
    """The script and the job's helper files, as kwnb copied them into the run folder at launch (unless
    run_files=False), plus `extra` files of kwnb's own (key: text)."""
    data, binary, sizes = {}, {}, {}
    for key in dict.fromkeys([run.script, *run.files] if run_files else []):
        if not CONFIGMAP_KEY.fullmatch(key) or len(key) > 253:
            raise OptionError(f"{key!r} cannot be a ConfigMap key (letters, digits, '-', '_', '.'): rename it, or "
                             f"put the files in the image and use --no-files")
        try:
            content = (run.dir / key).read_bytes()
        except OSError:
            raise OptionError(f"{key} is part of the run but is missing from {run.dir}") from None
        sizes[key] = len(content)
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            binary[key] = base64.b64encode(content).decode("ascii")
    for key, text in (extra or {}).items():
        if key in sizes:
            raise OptionError(f"the run has a file named {key}, which kwnb needs for its own: rename it")
        data[key], sizes[key] = text, len(text.encode("utf-8"))
    total = sum(sizes.values())
    if total > CONFIGMAP_LIMIT:
        listed = ", ".join(f"{key} {format_size(n)}" for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]))
        raise OptionError(f"the job's files come to {format_size(total)} ({listed}), more than a ConfigMap holds (1 MiB). "
                         f"Bake them into the image instead (COPY them to --workdir, default {DEFAULT_WORKDIR}) "
                         f"and export with --no-files; load data from a volume or object storage, not from files")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {**copy.deepcopy(metadata), "name": name}, "data": data}
    if binary:
        configmap["binaryData"] = binary
    return configmap


# ----- YAML -------------------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    """Block style (|) for multi-line strings, so that the files in the ConfigMap stay readable."""


class FlowList(list):
    """A list written on one line, [1, 2, 3], e.g. 127 exit codes that would otherwise take 127 lines."""


def _represent_str(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


def _represent_flow_list(dumper, value):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(FlowList, _represent_flow_list)


def to_yaml(objects: list[dict]) -> str:
    """The objects as one YAML stream, each starting with ---, keys in the order Kubernetes users expect."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, allow_unicode=True,
                         default_flow_style=False, width=120)


def write_manifest(export, path: str | os.PathLike) -> Path:
    target = Path(path).expanduser()
    if target.is_dir():
        raise OptionError(f"{path} is a directory")
    try:
        target.write_text(export.yaml, encoding="utf-8")
    except OSError as error:
        raise OptionError(f"cannot write {path}: {error.strerror or error}") from None
    return target
