"""The checks a `kwnb export --to job` manifest must pass (tests/test_export_job.py): Kubernetes' own
schemas of Job, Service and ConfigMap (1.26 and 1.37, tests/data/k8s), what those schemas cannot say
(names, labels that must match, indices, mounts), and a pod laid out and run here as Kubernetes would."""
import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

from kwnb.engine.live import cluster
from kwnb.machine import task_env
from openapi_formats import FORMATS

DATA = Path(__file__).parent / "data" / "k8s"
VERSIONS = ("v1.26.0", "v1.37.0")
KINDS = {"Job": "job-batch-v1", "Service": "service-v1", "ConfigMap": "configmap-v1"}
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
VALIDATORS = {(version, kind): jsonschema.Draft202012Validator(
    json.loads((DATA / version / f"{file}.json").read_text()), format_checker=FORMATS)
    for version in VERSIONS for kind, file in KINDS.items()}


def schema_errors(obj: dict, kind: str | None = None) -> list[str]:
    """Errors against the schema of `kind` (default: the object's own kind) in each version."""
    return [f"{version} {'.'.join(map(str, e.absolute_path))}: {e.message}" for version in VERSIONS
            for e in VALIDATORS[version, kind or obj["kind"]].iter_errors(obj)]


def by_kind(objects: list[dict]) -> dict[str, dict]:
    kinds = [o["kind"] for o in objects]
    assert sorted(kinds) == ["ConfigMap", "Job", "Service"], kinds
    return {o["kind"]: o for o in objects}


def problems(objects: list[dict], description: dict) -> list[str]:
    """What the API server, the Job controller or DNS would refuse or get wrong that no schema says."""
    objs = by_kind(objects)
    jb, svc, files = objs["Job"], objs["Service"], objs["ConfigMap"]
    spec, pod = jb["spec"], jb["spec"]["template"]["spec"]
    found = []
    name, service = jb["metadata"]["name"], svc["metadata"]["name"]
    if not (DNS_1035_LABEL.fullmatch(service) and len(service) <= 63):
        found.append(f"Service name {service!r} is not a DNS-1035 label")
    if not (DNS_1123_LABEL.fullmatch(name) and len(name) <= 63):
        found.append(f"Job name {name!r} is not a DNS-1123 label")  # it is also the job-name label's value
    if not (DNS_1123_SUBDOMAIN.fullmatch(files["metadata"]["name"]) and len(files["metadata"]["name"]) <= 253):
        found.append("ConfigMap name is not a DNS-1123 subdomain")
    hostnames = [f"{name}-{i}" for i in range(spec.get("completions") or 0)]
    found += [f"hostname {h!r} is not a DNS label of at most 63" for h in hostnames
              if not (DNS_1123_LABEL.fullmatch(h) and len(h) <= 63)]
    if len({o["metadata"].get("namespace") for o in objects}) != 1:
        found.append("the objects are in different namespaces")
    tasks = len(description["tasks"])
    if (spec.get("completionMode"), spec.get("completions"), spec.get("parallelism")) != ("Indexed", tasks, tasks):
        found.append(f"not an Indexed Job with completions = parallelism = {tasks} tasks")
    labels = jb["spec"]["template"]["metadata"].get("labels", {})
    selector = svc["spec"].get("selector") or {}
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        found.append(f"Service selector {selector} does not select the pods (labels {labels})")
    found += [f"label {k}={v!r} is not a valid label value" for o in objects + [jb["spec"]["template"]]
              for k, v in o["metadata"].get("labels", {}).items() if not (LABEL_VALUE.fullmatch(v) and len(v) <= 63)]
    if pod.get("subdomain") != service:
        found.append(f"pod subdomain {pod.get('subdomain')!r} is not the Service's name {service!r}")
    if svc["spec"].get("clusterIP") != "None":
        found.append("the Service is not headless (clusterIP: None)")
    if pod.get("restartPolicy") not in ("OnFailure", "Never"):
        found.append(f"a Job's pods restart OnFailure or Never, not {pod.get('restartPolicy')!r}")
    if "podFailurePolicy" in spec and pod["restartPolicy"] != "Never":
        found.append("podFailurePolicy needs restartPolicy Never")
    found += _container_problems(pod, svc, files)
    return found


def _container_problems(pod: dict, svc: dict, files: dict) -> list[str]:
    found = []
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    found += [f"{name} is set in the manifest: the entry point must build it per pod"
              for name in task_env.CLUSTER_VARIABLES if name in env]
    ports = {p["port"]: p.get("targetPort") for p in svc["spec"].get("ports", [])}
    container_ports = {p["containerPort"] for p in container.get("ports", [])}
    if not ports or any(target not in container_ports for target in ports.values()):
        found.append(f"Service ports {ports} do not reach the container's {sorted(container_ports)}")
    keys = {*files.get("data", {}), *files.get("binaryData", {})}
    found += [f"ConfigMap key {k!r} is not a valid key" for k in keys if not CONFIGMAP_KEY.fullmatch(k)]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounted = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is None:
            found.append(f"mount {mount['mountPath']} has no volume")
        elif "configMap" in volume:
            if volume["configMap"]["name"] != files["metadata"]["name"] or mount.get("subPath") not in keys:
                found.append(f"mount {mount['mountPath']} is not a key of the ConfigMap {files['metadata']['name']}")
            mounted[mount.get("subPath")] = mount["mountPath"]
    found += [f"ConfigMap key {k!r} is not mounted" for k in sorted(keys - set(mounted))]
    if container["command"][:1] != ["python"] or container["command"][1:] != [mounted.get("kwnb.k8s_entry.py")]:
        found.append(f"the command {container['command']} does not run the mounted entry point")
    return found


def check_manifest(text: str, run_dir: Path) -> dict[str, dict]:
    """Every check a `--to job` manifest for the run in `run_dir` must pass; returns its objects by kind."""
    description = json.loads((run_dir / "run.json").read_text())
    objects = list(yaml.safe_load_all(text))
    assert [o["kind"] for o in objects] == ["ConfigMap", "Service", "Job"]  # what the pods need, first
    assert [e for o in objects for e in schema_errors(o)] == []
    assert problems(objects, description) == []
    return by_kind(objects)


def lay_out_pod(objects: dict[str, dict], index: int, root: Path) -> tuple[list[str], Path, dict[str, str]]:
    """The command, working directory and environment of pod `index`, its mounts laid out under `root` from
    the ConfigMap; the entry point runs in a Python without site-packages (-S), so that it cannot import
    kwnb: the image has none."""
    pod = objects["Job"]["spec"]["template"]["spec"]
    [container], files = pod["containers"], objects["ConfigMap"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        target = root / mount["mountPath"].lstrip("/")
        if "emptyDir" in volumes[mount["name"]]:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        key = mount["subPath"]
        if key in files.get("data", {}):
            target.write_text(files["data"][key])
        else:
            target.write_bytes(base64.b64decode(files["binaryData"][key]))
    workdir = root / container["workingDir"].lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"], **{e["name"]: e["value"] for e in container["env"]},
           "JOB_COMPLETION_INDEX": str(index)}  # what Kubernetes adds in an Indexed Job's pods
    entry = root / container["command"][1].lstrip("/")
    return [sys.executable, "-S", str(entry), *container.get("args", [])], workdir, env


def run_pod(objects: dict[str, dict], index: int, root: Path, **env_changes) -> subprocess.CompletedProcess:
    """The container's command as pod `index` runs it; env_changes set (or, None, remove) variables."""
    argv, workdir, env = lay_out_pod(objects, index, root)
    env = {k: v for k, v in {**env, **env_changes}.items() if v is not None}
    return subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=60)


def engine_tf_config(objects: dict[str, dict], description: dict, index: int) -> dict:
    """What kwnb's engine computes for the task at `index`, with the DNS names Kubernetes gives the pods:
    hostname <job>-<index> (Indexed Job), subdomain the headless Service, at the Service's port."""
    tasks = [cluster.TaskId(t["type"], t["index"]) for t in description["tasks"]]
    name, service = objects["Job"]["metadata"]["name"], objects["Service"]["metadata"]["name"]
    port = objects["Service"]["spec"]["ports"][0]["port"]
    spec = cluster.cluster_spec(tasks, [f"{name}-{i}.{service}:{port}" for i in range(len(tasks))])
    return cluster.tf_config(spec, tasks[index])


def engine_environment(objects: dict[str, dict], description: dict, index: int, gpus: bool) -> dict[str, str]:
    """What kwnb's one builder (machine/task_env.py) gives the task at `index` of the run, with nothing inherited,
    for the pods' DNS names (engine_tf_config: where the engine would place its tasks, the config it makes each
    framework's variables from); gpus: as under --gpus."""
    facts = task_env.TaskFacts(gpus=gpus, config=engine_tf_config(objects, description, index),
                               framework=task_env.framework_named(description["framework"]))
    return task_env.task_environment(facts, description["env"], session={})
