"""A run as a plain Kubernetes Indexed Job plus a headless Service: no operator needed.

Pod i of an Indexed Job (completions = parallelism = the number of tasks) has hostname <job>-i, and
the headless Service that is the pods' subdomain gives it the DNS name <job>-i.<service>. Each pod
builds its own TF_CONFIG (a --framework jax run's: keras.distribution's variables, pod 0 the coordinator)
from JOB_COMPLETION_INDEX with kwnb/task/k8s_entry.py, which the ConfigMap ships (with
kwnb/task/tf_config.py, and jax_task.py for JAX) next to the job's files: the image needs no kwnb.
Index i is position i of the run (run.json's task list, chief first, ps tasks last).
"""
from __future__ import annotations

import copy
from pathlib import Path

from ..errors import OptionError
from ..machine.task_env import JAX, TENSORFLOW
from ..task import k8s_entry
from ..task.runfolder import RunDescription
from .kubernetes import (IMAGE_NEEDS, FlowList, check_image, check_namespace, check_workdir, configmap,
                         container_command, derive_name, environment, mount_files, resources, run_framework)

RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
# The container and its port, by the run's framework (TensorFlow's as in the TFJob, so that both exports read alike);
# port names have at most 15 characters (IANA_SVC_NAME). A JAX run's port is pod 0's coordinator's.
NAMES = {TENSORFLOW.name: ("tensorflow", "tf-grpc"), JAX.name: ("jax", "jax-coordinator")}  # (container, port)
PORT = 2222  # the port TFJobs use, so that images and policies carry over
LABEL = "kwnb/job"  # on every object and pod: the Service selects the pods by it, kubectl deletes by it
ENTRY_DIR = "/kwnb/entry"  # outside the working directory: the user's `import tf_config` must not find ours
TASK_DIR = Path(k8s_entry.__file__).parent
# ConfigMap key -> (file in kwnb/task/, file name in ENTRY_DIR). Keys start with "kwnb." so that they
# cannot be mistaken for the user's files, which go into the working directory under their own names.
ENTRY_FILES = {"kwnb.k8s_entry.py": ("k8s_entry.py", "k8s_entry.py"),
               "kwnb.tf_config.py": ("tf_config.py", k8s_entry.TF_CONFIG_COPY)}
JAX_ENTRY_FILES = {"kwnb.jax_task.py": ("jax_task.py", k8s_entry.JAX_TASK_COPY)}  # a --framework jax run's too
SIGNAL_EXIT_CODES = range(128, 256)  # 128 + the signal's number: the task was killed (preempted, OOM)


def header(run: RunDescription, name: str) -> str:
    counts = ", ".join(f"{n} {t}" for t, n in run.counts.items())
    return (f"# Kubernetes Indexed Job + headless Service for the kwnb run {run.dir.name} ({counts}), written by kwnb "
            f"export.\n# Needs Kubernetes 1.26 or newer, no operator. Start: kubectl apply -f THIS_FILE\n"
            f"# Follow: kubectl get job {name} -w; kubectl logs -f -l {LABEL}={name} --prefix "
            f"--max-log-requests={len(run.tasks)}\n# Remove: kubectl delete job,service,configmap -l {LABEL}={name}\n"
            f"# The image needs {IMAGE_NEEDS[run_framework(run).name][0]}; not kwnb.\n")


def entry_files(run: RunDescription) -> dict[str, tuple[str, str]]:
    """ConfigMap key -> (file in kwnb/task/, file name in ENTRY_DIR) of what the run's pods need before its script."""
    return {**ENTRY_FILES, **(JAX_ENTRY_FILES if run_framework(run) == JAX else {})}


def indexed_job(run: RunDescription, *, image: str | None, job_name: str | None = None, namespace: str | None = None,
                restart_policy: str = "OnFailure", backoff_limit: int | None = None,
                command: str | list[str] | None = None, workdir: str = "/kwnb/job", files: bool = True,
                cpu: str | None = None, memory: str | None = None, gpus_per_pod: int = 0,
                ) -> tuple[str, list[dict], list[str]]:
    """The Job's name, its objects (ConfigMap, Service, Job: what the pods need first) and notes for the user."""
    check_image(image, run_framework(run).name)
    name = derive_name(job_name, run.name, 63 - len(f"-{len(run.tasks) - 1}"))  # hostnames <job>-<index>: 63 at most
    check_namespace(namespace)
    backoff_limit = _check_restarts(restart_policy, backoff_limit, len(run.tasks))
    workdir = check_workdir(workdir)
    if workdir == ENTRY_DIR or workdir.startswith(ENTRY_DIR + "/") or ENTRY_DIR.startswith(workdir + "/"):
        raise OptionError(f"--workdir must be outside {ENTRY_DIR}, where kwnb's entry point is mounted, not {workdir!r}")
    env, notes = environment(run, "kwnb's entry point (kwnb/task/k8s_entry.py)", gpus_per_pod)
    env.update({k8s_entry.TASKS_ENV: ",".join(f"{t}:{i}" for t, i in run.tasks), k8s_entry.JOB_ENV: name,
                k8s_entry.SERVICE_ENV: name, k8s_entry.PORT_ENV: str(PORT)})
    notes += _notes(run, name, files, gpus_per_pod)
    metadata = {"name": name, **({"namespace": namespace} if namespace else {}), "labels": {LABEL: name},
                "annotations": {"kwnb/run": run.dir.name}}
    user = container_command(command, run)  # python main.py ARGS, or --command: what the entry point runs
    container_name, port_name = NAMES[run_framework(run).name]
    container = {"name": container_name, "image": image, "command": ["python", f"{ENTRY_DIR}/k8s_entry.py"],
                 "args": user["command"][1:] + user.get("args", []) if command is None else user["command"],
                 "workingDir": workdir, "env": [{"name": k, "value": v} for k, v in env.items()],
                 "ports": [{"name": port_name, "containerPort": PORT}]}
    limits = resources(cpu, memory, gpus_per_pod)
    if limits:
        container["resources"] = limits
    pod_spec: dict = {"subdomain": name, "restartPolicy": "OnFailure" if restart_policy == "OnFailure" else "Never",
                      "containers": [container]}
    shipped = entry_files(run)
    entry = {key: (TASK_DIR / source).read_text(encoding="utf-8") for key, (source, _) in shipped.items()}
    files_map = configmap(run, f"{name}-files", metadata, run_files=files, extra=entry)
    mount_files(container, pod_spec, files_map, workdir, scratch=files,
                places={key: f"{ENTRY_DIR}/{target}" for key, (_, target) in shipped.items()})
    return name, [files_map, _service(metadata, port_name),
                  _job(run, metadata, pod_spec, restart_policy, backoff_limit)], notes


def _check_restarts(restart_policy: str, backoff_limit: int | None, tasks: int) -> int:
    """The Job's backoffLimit: restarts (OnFailure) or replaced pods (ExitCode) allowed, 0 with Never.

    By default 3 per task: the Job counts every pod's restart, and when one task of a
    MultiWorkerMirroredStrategy cluster dies its peers fail too (TF 2.21: the other worker exited 1
    within 3 s, "Collective ops is aborted"), so one failure costs about one restart per task."""
    if restart_policy not in RESTART_POLICIES:
        raise OptionError(f"--restart-policy must be one of {', '.join(RESTART_POLICIES)}, not {restart_policy!r}")
    if restart_policy == "Never":
        if backoff_limit:
            raise OptionError("--backoff-limit does not go with --restart-policy Never, whose first failure fails the "
                              "job: use OnFailure or ExitCode to allow restarts")
        return 0
    if backoff_limit is None:
        return 3 * tasks
    if backoff_limit < 0:
        raise OptionError(f"--backoff-limit must be 0 or more, not {backoff_limit}")
    return backoff_limit


def _notes(run: RunDescription, name: str, files: bool, gpus_per_pod: int) -> list[str]:
    notes = []
    if "ps" in run.counts and "chief" not in run.counts:
        notes.append("this run has ps tasks: under ParameterServerStrategy its coordinator was the notebook, "
                     "which the manifest lacks; add a task that runs the coordinator code")
    if "ps" in run.counts:
        notes.append(f"ps tasks never exit on their own, so this Job never completes: delete it when training is "
                     f"done (kubectl delete job,service,configmap -l {LABEL}={name})")
    elif "evaluator" in run.counts:
        notes.append(f"the evaluator ends only if its SidecarEvaluator has max_evaluations (the last checkpoint's "
                     f"number); otherwise this Job never completes: delete it when training is done "
                     f"(kubectl delete job,service,configmap -l {LABEL}={name})")
    if run.gpus and not gpus_per_pod:
        notes.append("the run used GPUs; add --gpus-per-pod N to request them in the cluster")
    jax = run_framework(run) == JAX
    if jax:
        notes.append("--framework jax: a pod whose script raises ends at once (its entry point runs the script with "
                     "kwnb's hook); the others end when their next collective fails, or after JAX's own timeouts "
                     "(up to 300 s) where they wait on it; kwnb ends a run's tasks at once only where it runs them")
    if not files:
        *first, last = [target for _, target in entry_files(run).values()]
        shipped = f"{', '.join(first)} and {last}"
        notes.append(f"--no-files: the ConfigMap {name}-files holds only kwnb's entry point ({shipped}), which gives "
                     f"each pod its {'KERAS_DISTRIBUTION_* variables' if jax else 'TF_CONFIG'}; the script must be in "
                     f"the image")
    return notes


def _service(metadata: dict, port_name: str) -> dict:
    """Headless (no virtual IP, no load balancing): it exists only to give each pod a DNS name."""
    name = metadata["name"]
    return {"apiVersion": "v1", "kind": "Service", "metadata": copy.deepcopy(metadata),
            "spec": {"clusterIP": "None", "selector": {LABEL: name},
                     # Records from the moment a pod has an IP, not once it is Ready: TensorFlow (and JAX) dial their
                     # peers at start, and a peer still starting would otherwise not resolve.
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": port_name, "port": PORT, "targetPort": PORT}]}}


def _job(run: RunDescription, metadata: dict, pod_spec: dict, restart_policy: str, backoff_limit: int) -> dict:
    name = metadata["name"]
    template = {"metadata": {"labels": {LABEL: name},
                             # An Istio sidecar never exits, and a Job with one never completes.
                             "annotations": {"sidecar.istio.io/inject": "false"}},
                "spec": pod_spec}
    spec: dict = {"completionMode": "Indexed", "completions": len(run.tasks), "parallelism": len(run.tasks),
                  "backoffLimit": backoff_limit}
    if restart_policy == "ExitCode":
        # The script's own failure (exit 1-127) fails the Job at once; a pod killed by a signal (128-255)
        # is replaced by a new pod with the same index, counted against backoffLimit.
        # onPodConditions is empty but present: Kubernetes 1.26's schema requires it (optional from 1.27).
        spec["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": pod_spec["containers"][0]["name"], "operator": "NotIn",
            "values": FlowList(SIGNAL_EXIT_CODES)},
            "onPodConditions": []}]}
    spec["template"] = template
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": copy.deepcopy(metadata),
            "spec": spec}
