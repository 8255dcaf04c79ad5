"""A run as a Kubeflow TFJob: one replica spec per task type, plus the ConfigMap of the job's files.

The training operator, not kwnb, gives each pod its TF_CONFIG; kwnb only describes the job.
"""
from __future__ import annotations

import copy

from ..errors import OptionError
from ..machine.task_env import TENSORFLOW
from ..task.runfolder import RunDescription
from .kubernetes import check_image, check_namespace, check_workdir, configmap, container_command, derive_name, environment, mount_files, resources

# kwnb's task types as the TFJob spells its replica types, in the order the manifest lists them.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
CONTAINER_NAME = "tensorflow"  # the operator sets TF_CONFIG and the port only in the container of this name
PORT_NAME, PORT = "tfjob-port", 2222  # the operator's default port for a TFJob


def header(run: RunDescription, name: str) -> str:
    first = next(iter(run.counts)).lower()
    counts = ", ".join(f"{n} {REPLICA_TYPES[t]}" for t, n in run.counts.items())
    return (f"# Kubeflow TFJob for the kwnb run {run.dir.name} ({counts}), written by kwnb export.\n"
            f"# Needs the Kubeflow training operator. Start: kubectl apply -f THIS_FILE\n"
            f"# Follow: kubectl get tfjob {name} -w; kubectl logs -f {name}-{first}-0\n")


def tfjob(run: RunDescription, *, image: str | None, job_name: str | None = None, namespace: str | None = None,
          restart_policy: str = "OnFailure", backoff_limit: int = 3, command: str | list[str] | None = None,
          workdir: str = "/kwnb/job", files: bool = True, cpu: str | None = None, memory: str | None = None,
          gpus_per_pod: int = 0) -> tuple[str, list[dict], list[str]]:
    """The TFJob's name, its objects (the TFJob, and the ConfigMap unless files=False) and notes for the user."""
    if run.framework != TENSORFLOW.name:
        raise OptionError(f"a TFJob cannot run a --framework {run.framework} run: its operator gives pods TF_CONFIG "
                          f"only; export it with --to job, whose entry point gives each pod what a --framework "
                          f"{run.framework} task gets")
    check_image(image)
    name = _job_name(job_name, run.name, run.counts)
    check_namespace(namespace)
    if restart_policy not in RESTART_POLICIES:
        raise OptionError(f"--restart-policy must be one of {', '.join(RESTART_POLICIES)}, not {restart_policy!r}")
    if backoff_limit < 0:
        raise OptionError(f"--backoff-limit must be 0 or more, not {backoff_limit}")
    workdir = check_workdir(workdir)
    env, notes = environment(run, "the training operator", gpus_per_pod)
    if "ps" in run.counts and "chief" not in run.counts:
        notes.append("this run has ps tasks: under ParameterServerStrategy its coordinator was the notebook, "
                     "which the manifest lacks; add a Chief replica that runs the coordinator code")
    if run.gpus and not gpus_per_pod:
        notes.append("the run used GPUs; add --gpus-per-pod N to request them in the cluster")
    metadata = {"name": name, **({"namespace": namespace} if namespace else {}),
                "annotations": {"kwnb/run": run.dir.name}}
    container = {"name": CONTAINER_NAME, "image": image, **container_command(command, run), "workingDir": workdir,
                 "env": [{"name": k, "value": v} for k, v in env.items()],
                 "ports": [{"name": PORT_NAME, "containerPort": PORT}]}
    limits = resources(cpu, memory, gpus_per_pod)
    if limits:
        container["resources"] = limits
    pod_spec: dict = {"containers": [container]}
    objects = []
    if files:
        files_map = configmap(run, f"{name}-files", metadata)
        mount_files(container, pod_spec, files_map, workdir)
        objects.append(files_map)
    job = _job(run, metadata, pod_spec, restart_policy, backoff_limit)
    return name, [job, *objects], notes


def _job(run: RunDescription, metadata: dict, pod_spec: dict, restart_policy: str, backoff_limit: int) -> dict:
    template = {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},  # Kubeflow's advice for TFJobs
                "spec": pod_spec}
    run_policy: dict = {}
    if restart_policy == "OnFailure":
        run_policy["backoffLimit"] = backoff_limit
    if "ps" in run.counts or "evaluator" in run.counts:
        run_policy["cleanPodPolicy"] = "Running"  # they never exit on their own: end them with the job
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": metadata,
        "spec": {
            **({"runPolicy": run_policy} if run_policy else {}),
            "tfReplicaSpecs": {
                REPLICA_TYPES[task_type]: {"replicas": count, "restartPolicy": restart_policy,
                                           "template": copy.deepcopy(template)}
                for task_type, count in run.counts.items()},
        },
    }


def _job_name(given: str | None, run_name: str, counts: dict[str, int]) -> str:
    """A DNS-1035 label (the operator's rule for TFJob names) short enough for its pod and service names."""
    # Pods and services are named <job>-<type>-<index>, and a service name is at most 63 characters.
    return derive_name(given, run_name, 63 - max(len(f"-{t}-{n - 1}") for t, n in counts.items()))
