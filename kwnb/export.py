"""A run as Kubernetes objects: a Kubeflow TFJob, and a ConfigMap with the files the job needs.

Reads only the run folder (run.json and the copies of the script and helper files kwnb keeps there), so
a run of this kernel and a folder left by an old session export alike. Engine-level: no IPython here.
The training operator, not kwnb, gives each pod its TF_CONFIG; kwnb only describes the job.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

TARGETS = ("tfjob",)
# kwnb's task types as the TFJob spells its replica types, in the order the manifest lists them.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
CONTAINER_NAME = "tensorflow"  # the operator sets TF_CONFIG and the port only in the container of this name
PORT_NAME, PORT = "tfjob-port", 2222  # the operator's default port for a TFJob
CONFIGMAP_LIMIT = 1024 * 1024  # the API server refuses a ConfigMap whose data add up to more
DEFAULT_WORKDIR = "/kwnb/job"
DEFAULT_ENV = {
    "TF_USE_LEGACY_KERAS": "1",  # Keras 3 cannot run MultiWorkerMirroredStrategy; tf-keras can
    "PYTHONUNBUFFERED": "1",  # so that `kubectl logs -f` shows lines as they are printed
}
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
QUANTITY = re.compile(r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?")

# Options shared by `kwnb export` and `%kw_export`, as plain (args, kwargs) pairs (see options.py).
EXPORT_ARGUMENTS: list[tuple[tuple, dict]] = [
    (("--to",), dict(choices=TARGETS, required=True,
                     help="what to write: tfjob (a Kubeflow TFJob, plus a ConfigMap with the job's files)")),
    (("--image",), dict(default=None, metavar="IMAGE",
                        help="container image with Python, TensorFlow and tf-keras of the same version (required)")),
    (("--job-name",), dict(default=None, metavar="NAME", help="the TFJob's name (default: from the run's name)")),
    (("--namespace",), dict(default=None, metavar="NS", help="Kubernetes namespace (default: kubectl's current one)")),
    (("--restart-policy",), dict(choices=RESTART_POLICIES, default="OnFailure",
                                 help="OnFailure (default): a failed pod restarts in place, up to --backoff-limit "
                                      "times, and training resumes if the script uses BackupAndRestore or "
                                      "checkpoints; ExitCode: restart only pods killed by a signal (exit code "
                                      "128-255, e.g. preempted); Never: the first failure fails the job")),
    (("--backoff-limit",), dict(type=int, default=3, metavar="K",
                                help="restarts allowed with OnFailure before the job fails (default 3)")),
    (("--command",), dict(dest="container_command", default=None, metavar='"..."',
                          help="the container's command (default: python SCRIPT ARGS, as the run started)")),
    (("--workdir",), dict(default=DEFAULT_WORKDIR, metavar="DIR",
                          help=f"working directory in the container, where the files go (default {DEFAULT_WORKDIR})")),
    (("--no-files",), dict(action="store_true",
                           help="no ConfigMap: the script and helper files are already in the image, in --workdir")),
    (("--cpu",), dict(default=None, metavar="Q", help="CPU requested per pod, e.g. 2 or 500m")),
    (("--memory",), dict(default=None, metavar="Q", help="memory requested (and limit) per pod, e.g. 4Gi")),
    (("--gpus-per-pod",), dict(type=int, default=0, metavar="N", help="GPUs per pod (nvidia.com/gpu; default 0)")),
]


def add_export_arguments(parser) -> None:
    for args, kwargs in EXPORT_ARGUMENTS:
        parser.add_argument(*args, **kwargs)


def export_options(namespace) -> dict:
    """Keyword arguments for `export_run` from parsed options."""
    command = namespace.container_command  # not `command`: that is the CLI's subcommand
    if command and len(command) > 1 and command[0] == command[-1] and command[0] in "\"'":
        command = command[1:-1]  # IPython's magic parser keeps the quotes
    return dict(to=namespace.to, image=namespace.image, job_name=namespace.job_name, namespace=namespace.namespace,
                restart_policy=namespace.restart_policy, backoff_limit=namespace.backoff_limit, command=command,
                workdir=namespace.workdir, files=not namespace.no_files, cpu=namespace.cpu, memory=namespace.memory,
                gpus_per_pod=namespace.gpus_per_pod)


# ----- run folders ----------------------------------------------------------------------------------
@dataclass
class RunDescription:
    """What run.json says about a run: enough to launch it again elsewhere."""

    dir: Path
    name: str
    script: str
    args: list[str]
    tasks: list[tuple[str, int]]
    env: dict[str, str]
    files: list[str]
    gpus: bool = False

    @property
    def counts(self) -> dict[str, int]:
        """Tasks per type, in TFJob order: {'worker': 2, 'ps': 1}."""
        counted = Counter(task_type for task_type, _ in self.tasks)
        return {t: counted[t] for t in REPLICA_TYPES if counted[t]}


def default_runs_dir() -> Path:
    """Where runs started here are kept: $KWNB_RUNS_DIR, else .kwnb/runs of the current directory."""
    return Path(os.environ.get("KWNB_RUNS_DIR") or Path.cwd() / ".kwnb" / "runs")


def find_run_dir(ref: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> Path:
    """A run folder from a path (the folder or its run.json) or a run name (its newest folder)."""
    path = Path(ref).expanduser()
    if path.name == "run.json" and path.is_file():
        return path.parent
    if path.is_dir():
        if not (path / "run.json").is_file():
            raise ValueError(f"{path} is not a kwnb run folder: it has no run.json "
                             f"(folders from before kwnb wrote run.json cannot be exported)")
        return path
    name = str(ref)
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    matches, names = [], set()
    if base.is_dir():
        for folder in base.iterdir():
            described = _peek_name(folder)
            if described:
                names.add(described)
            if described == name and folder.name.startswith(name + "-"):
                matches.append(folder)
    if not matches:
        where = f"in {base} (runs there: {', '.join(sorted(names)) or 'none'})" if base.is_dir() else \
            f"({base} does not exist)"
        raise ValueError(f"no run named {name!r} and no run folder at {path} {where}")
    return max(matches, key=lambda folder: _launch_order(folder, name))


def _peek_name(folder: Path) -> str | None:
    try:
        name = json.loads((folder / "run.json").read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def _launch_order(folder: Path, name: str) -> tuple:
    """Folders are NAME-YYYYmmdd-HHMMSS, with -K added when one second saw several launches."""
    stamp = re.fullmatch(r"(\d{8}-\d{6})(?:-(\d+))?", folder.name[len(name) + 1:])
    if stamp:
        return 1, stamp.group(1), int(stamp.group(2) or 0)
    return 0, "", folder.stat().st_mtime


def read_run(run_dir: str | os.PathLike) -> RunDescription:
    """run.json of a run folder, checked field by field so that a bad file gets a precise message."""
    path = Path(run_dir) / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path.parent} is not a kwnb run folder: it has no run.json") from None
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None

    def need(key, kind, what, default=None):
        value = data.get(key, default) if isinstance(data, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ValueError(f"{path}: {key!r} must be {what}")
        return value

    name, script = need("name", str, "a string"), need("script", str, "a file name")
    args = need("args", list, "a list of strings", [])
    env = need("env", dict, "a mapping of strings", {})
    files = need("files", list, "a list of file names", [])
    tasks = need("tasks", list, "a list of {type, index}")
    if not all(isinstance(a, str) for a in args) or not all(isinstance(f, str) for f in files) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"{path}: 'args', 'files' and 'env' must hold strings")
    if not tasks or not all(isinstance(t, dict) and t.get("type") in REPLICA_TYPES and isinstance(t.get("index"), int)
                            for t in tasks):
        raise ValueError(f"{path}: 'tasks' must list {{type, index}} with a type among {', '.join(REPLICA_TYPES)}")
    return RunDescription(Path(run_dir), name, script, list(args), [(t["type"], t["index"]) for t in tasks],
                          dict(env), list(files), bool(data.get("gpus", False)))


# ----- the manifest -----------------------------------------------------------------------------------
@dataclass
class Export:
    """Kubernetes objects for a run, their YAML, and what the user should be told about them."""

    run: RunDescription
    name: str
    objects: list[dict]
    notes: list[str] = field(default_factory=list)

    @property
    def yaml(self) -> str:
        first = next(iter(self.run.counts)).lower()
        counts = ", ".join(f"{n} {REPLICA_TYPES[t]}" for t, n in self.run.counts.items())
        header = (f"# Kubeflow TFJob for the kwnb run {self.run.dir.name} ({counts}), written by kwnb export.\n"
                  f"# Needs the Kubeflow training operator. Start: kubectl apply -f THIS_FILE\n"
                  f"# Follow: kubectl get tfjob {self.name} -w; kubectl logs -f {self.name}-{first}-0\n")
        return header + to_yaml(self.objects)


def export_run(run_dir: str | os.PathLike, to: str = "tfjob", **options) -> Export:
    """Kubernetes objects for the run in `run_dir`; user errors are ValueErrors that say what to do."""
    if to not in TARGETS:
        raise ValueError(f"cannot export to {to!r}: only {', '.join(TARGETS)}")
    return tfjob(read_run(run_dir), **options)


def tfjob(run: RunDescription, *, image: str | None, job_name: str | None = None, namespace: str | None = None,
          restart_policy: str = "OnFailure", backoff_limit: int = 3, command: str | list[str] | None = None,
          workdir: str = DEFAULT_WORKDIR, files: bool = True, cpu: str | None = None, memory: str | None = None,
          gpus_per_pod: int = 0) -> Export:
    """A TFJob with one replica spec per task type of the run, and a ConfigMap with the job's files."""
    _check_image(image)
    counts = run.counts
    name = _job_name(job_name, run.name, counts)
    if namespace is not None and (len(namespace) > 63 or not DNS_1123_LABEL.fullmatch(namespace)):
        raise ValueError(f"--namespace must be a DNS-1123 label (lowercase letters, digits, '-'), not {namespace!r}")
    if restart_policy not in RESTART_POLICIES:
        raise ValueError(f"--restart-policy must be one of {', '.join(RESTART_POLICIES)}, not {restart_policy!r}")
    if backoff_limit < 0:
        raise ValueError(f"--backoff-limit must be 0 or more, not {backoff_limit}")
    if not workdir.startswith("/") or ":" in workdir or not workdir.strip("/"):
        raise ValueError(f"--workdir must be an absolute path (not /) without ':', not {workdir!r}")
    workdir = workdir.rstrip("/")
    notes = []

    env = dict(DEFAULT_ENV)
    user_env = dict(run.env)
    if user_env.pop("TF_CONFIG", None) is not None:
        notes.append("left out the run's TF_CONFIG: the training operator gives each pod its own")
    env.update(user_env)
    if user_env:
        notes.append(f"the manifest sets the run's environment variables {', '.join(user_env)} in plain text; "
                     f"keep secrets in a Kubernetes Secret instead")
    if "ps" in counts:
        notes.append("this run has ps tasks: under ParameterServerStrategy its coordinator was the notebook, "
                     "which the manifest lacks; add a Chief replica that runs the coordinator code")
    if run.gpus and not gpus_per_pod:
        notes.append("the run used GPUs; add --gpus-per-pod N to request them in the cluster")

    metadata = {"name": name, **({"namespace": namespace} if namespace else {}),
                "annotations": {"kwnb/run": run.dir.name}}
    container = {"name": CONTAINER_NAME, "image": image, **_command(command, run), "workingDir": workdir,
                 "env": [{"name": k, "value": v} for k, v in env.items()],
                 "ports": [{"name": PORT_NAME, "containerPort": PORT}]}
    resources = _resources(cpu, memory, gpus_per_pod)
    if resources:
        container["resources"] = resources
    pod_spec: dict = {"containers": [container]}
    objects = []
    if files:
        configmap = _configmap(run, f"{name}-files", metadata)
        # The working directory is a writable scratch folder (relative checkpoint paths must work); each
        # file is mounted into it from the ConfigMap, read-only.
        container["volumeMounts"] = [{"name": "workdir", "mountPath": workdir}] + [
            {"name": "job-files", "mountPath": f"{workdir}/{key}", "subPath": key, "readOnly": True}
            for key in (*configmap.get("data", {}), *configmap.get("binaryData", {}))]
        pod_spec["volumes"] = [{"name": "workdir", "emptyDir": {}},
                               {"name": "job-files", "configMap": {"name": configmap["metadata"]["name"]}}]
        objects.append(configmap)
    template = {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},  # Kubeflow's advice for TFJobs
                "spec": pod_spec}
    run_policy: dict = {}
    if restart_policy == "OnFailure":
        run_policy["backoffLimit"] = backoff_limit
    if "ps" in counts or "evaluator" in counts:
        run_policy["cleanPodPolicy"] = "Running"  # they never exit on their own: end them with the job
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": metadata,
        "spec": {
            **({"runPolicy": run_policy} if run_policy else {}),
            "tfReplicaSpecs": {
                REPLICA_TYPES[task_type]: {"replicas": count, "restartPolicy": restart_policy,
                                           "template": copy.deepcopy(template)}
                for task_type, count in counts.items()},
        },
    }
    return Export(run, name, [job, *objects], notes)


def _check_image(image: str | None) -> None:
    if image and not any(c.isspace() for c in image):
        return
    versions = _local_versions()
    pins = (f"tensorflow=={versions[0]} and tf-keras=={versions[1]}, as here" if versions
            else "tensorflow==2.21.* and tf-keras==2.21.*")
    problem = "--image is required" if not image else f"--image must be an image reference, not {image!r}"
    raise ValueError(f"{problem}: an image with Python, TensorFlow and tf-keras of the same minor version "
                     f"(e.g. {pins}), plus whatever the script imports. No public image pins both: build one "
                     f"that runs pip install -r binder/requirements.txt in a copy of the kwnb repository (that "
                     f"installs kwnb too), push it, and pass --image REGISTRY/NAME:TAG")


def _local_versions() -> tuple[str, str] | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorflow"), version("tf-keras")
    except PackageNotFoundError:
        return None


def _job_name(given: str | None, run_name: str, counts: dict[str, int]) -> str:
    """A DNS-1035 label (the operator's rule for TFJob names) short enough for its pod and service names."""
    # Pods and services are named <job>-<type>-<index>, and a service name is at most 63 characters.
    limit = 63 - max(len(f"-{t}-{n - 1}") for t, n in counts.items())
    if given is not None:
        if len(given) > limit or not DNS_1035_LABEL.fullmatch(given):
            raise ValueError(f"--job-name must be lowercase letters, digits and '-', start with a letter, end with a "
                             f"letter or digit, and have at most {limit} characters here, not {given!r}")
        return given
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", run_name.lower())).strip("-")
    if not name[:1].isalpha():
        name = f"kwnb-{name}".rstrip("-")
    return name[:limit].rstrip("-")


def _command(command: str | list[str] | None, run: RunDescription) -> dict:
    if command is None:
        return {"command": ["python", run.script], **({"args": list(run.args)} if run.args else {})}
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as error:
        raise ValueError(f"--command: {error}") from None
    if not words:
        raise ValueError("--command is empty")
    return {"command": words}


def _resources(cpu: str | None, memory: str | None, gpus: int) -> dict:
    for label, value in (("--cpu", cpu), ("--memory", memory)):
        if value is not None and not QUANTITY.fullmatch(value):
            raise ValueError(f"{label} must be a Kubernetes quantity such as 2, 500m or 4Gi, not {value!r}")
    if gpus < 0:
        raise ValueError(f"--gpus-per-pod must be 0 or more, not {gpus}")
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    limits = {**({"memory": memory} if memory else {}), **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def _configmap(run: RunDescription, name: str, metadata: dict) -> dict:
    """The script and the job's helper files, as kwnb copied them into the run folder at launch."""
    data, binary, sizes = {}, {}, {}
    for key in dict.fromkeys([run.script, *run.files]):
        if not CONFIGMAP_KEY.fullmatch(key) or len(key) > 253:
            raise ValueError(f"{key!r} cannot be a ConfigMap key (letters, digits, '-', '_', '.'): rename it, or "
                             f"put the files in the image and use --no-files")
        try:
            content = (run.dir / key).read_bytes()
        except OSError:
            raise ValueError(f"{key} is part of the run but is missing from {run.dir}") from None
        sizes[key] = len(content)
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            binary[key] = base64.b64encode(content).decode("ascii")
    total = sum(sizes.values())
    if total > CONFIGMAP_LIMIT:
        listed = ", ".join(f"{key} {_size(n)}" for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]))
        raise ValueError(f"the job's files come to {_size(total)} ({listed}), more than a ConfigMap holds (1 MiB). "
                         f"Bake them into the image instead (COPY them to --workdir, default {DEFAULT_WORKDIR}) "
                         f"and export with --no-files; load data from a volume or object storage, not from files")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {**copy.deepcopy(metadata), "name": name}, "data": data}
    if binary:
        configmap["binaryData"] = binary
    return configmap


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


# ----- YAML -------------------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    """Block style (|) for multi-line strings, so that the files in the ConfigMap stay readable."""


def _represent_str(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _represent_str)


def to_yaml(objects: list[dict]) -> str:
    """The objects as one YAML stream, each starting with ---, keys in the order Kubernetes users expect."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, allow_unicode=True,
                         default_flow_style=False, width=120)


def write_manifest(export: Export, path: str | os.PathLike) -> Path:
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"{path} is a directory")
    try:
        target.write_text(export.yaml, encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot write {path}: {error.strerror or error}") from None
    return target
