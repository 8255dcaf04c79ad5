"""`kwnb export`: a run folder as Kubernetes objects, one module per target (tfjob.py, job.py).

Reads only the run folder (run.json and the copies of the script and helper files kwnb keeps there),
so a run of this kernel and a folder left by an old session export alike. No IPython here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import OptionError
from ..task.runfolder import RunDescription, read_description
from . import job, tfjob
from .kubernetes import DEFAULT_WORKDIR, to_yaml, write_manifest

__all__ = ["TARGETS", "EXPORT_ARGUMENTS", "Export", "add_export_arguments", "export_options", "export_run",
           "write_manifest"]

# --to NAME: (what it writes, as the CLI and the magic name it; the function that builds it; its YAML header)
_TARGETS = {"tfjob": ("TFJob", tfjob.tfjob, tfjob.header),
            "job": ("Indexed Job", job.indexed_job, job.header)}
TARGETS = tuple(_TARGETS)

# Options shared by `kwnb export` and `%kw_export`, as plain (args, kwargs) pairs (see options.py).
EXPORT_ARGUMENTS: list[tuple[tuple, dict]] = [
    (("--to",), dict(choices=TARGETS, required=True,
                     help="what to write: tfjob (a Kubeflow TFJob, plus a ConfigMap with the job's files) or job (a "
                          "plain Indexed Job and a headless Service, no operator needed, plus the ConfigMap)")),
    (("--image",), dict(default=None, metavar="IMAGE",
                        help="container image with Python, TensorFlow and tf-keras of the same version; for a "
                             "--framework jax run jax and keras 3 (required)")),
    (("--job-name",), dict(default=None, metavar="NAME", help="the TFJob's or Job's name (default: from the run's name)")),
    (("--namespace",), dict(default=None, metavar="NS", help="Kubernetes namespace (default: kubectl's current one)")),
    (("--restart-policy",), dict(choices=job.RESTART_POLICIES, default="OnFailure",  # tfjob's too
                                 help="OnFailure (default): a failed pod restarts in place, up to --backoff-limit "
                                      "times, and training resumes if the script uses BackupAndRestore or "
                                      "checkpoints; ExitCode: restart only pods killed by a signal (exit code "
                                      "128-255, e.g. preempted); Never: the first failure fails the job")),
    (("--backoff-limit",), dict(type=int, default=None, metavar="K",
                                help="restarts allowed with OnFailure (with --to job, ExitCode too) before the job "
                                     "fails; every pod's restart counts (default 3; with --to job 3 per task, as one "
                                     "task's failure makes its peers fail too)")),
    (("--command",), dict(dest="container_command", default=None, metavar='"..."',
                          help="the container's command (default: python SCRIPT ARGS, as the run started)")),
    (("--workdir",), dict(default=DEFAULT_WORKDIR, metavar="DIR",
                          help=f"working directory in the container, where the files go (default {DEFAULT_WORKDIR})")),
    (("--no-files",), dict(action="store_true",
                           help="the script and helper files are already in the image, in --workdir: no "
                                "ConfigMap of them (--to job still ships its entry point in a small one)")),
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
    options = dict(to=namespace.to, image=namespace.image, job_name=namespace.job_name, namespace=namespace.namespace,
                   restart_policy=namespace.restart_policy, backoff_limit=namespace.backoff_limit, command=command,
                   workdir=namespace.workdir, files=not namespace.no_files, cpu=namespace.cpu,
                   memory=namespace.memory, gpus_per_pod=namespace.gpus_per_pod)
    if options["backoff_limit"] is None:  # not given: the target's default (a Job refuses one given with Never)
        del options["backoff_limit"]
    return options


@dataclass
class Export:
    """Kubernetes objects for a run, their YAML, and what the user should be told about them."""

    run: RunDescription
    name: str
    objects: list[dict]
    notes: list[str] = field(default_factory=list)
    header: str = ""
    kind: str = "TFJob"  # what was written, for messages: "TFJob" or "Indexed Job"

    @property
    def yaml(self) -> str:
        return self.header + to_yaml(self.objects)


def export_run(run_dir: str | os.PathLike, to: str = "tfjob", **options) -> Export:
    """Kubernetes objects for the run in `run_dir`; user errors are OptionErrors that say what to do."""
    if to not in TARGETS:
        raise OptionError(f"cannot export to {to!r}: only {', '.join(TARGETS)}")
    kind, build, header = _TARGETS[to]
    run = read_description(run_dir)
    name, objects, notes = build(run, **options)
    return Export(run, name, objects, notes, header(run, name), kind)
