"""kwnb export / %kw_export: a run folder becomes a TFJob (+ ConfigMap) that the operator's own schema accepts.

Kubernetes is not available here, so the manifest is checked, not run: against the openAPIV3Schema of the
training operator's TFJob CRD (tests/data/tfjob, see its README), and for what the operator needs that the
schema cannot say. Runs are built with `Run(...)` (which starts nothing) or by writing run.json by hand.
"""
import copy
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import yaml
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

from kwnb import cli
from kwnb.engine.live import registry
from kwnb.engine.live.run import Run
from kwnb.export import export_run
from kwnb.task.runfolder import find_run_dir
from openapi_formats import FORMATS

DATA = Path(__file__).parent / "data" / "tfjob"
CRD = json.loads((DATA / "kubeflow.org_tfjobs.json").read_text())
VERSION = next(v for v in CRD["spec"]["versions"] if v["storage"])
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
# The TFJob's replica types, as the operator spells them (TFJobReplicaTypeChief, ...Worker, ...PS, ...Evaluator).
TFJOB_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=FORMATS)


def schema_errors(job: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(job)]


def pruned_fields(value, schema, path="") -> list[str]:
    """Fields the schema does not declare: the API server would drop them silently (or refuse them, strict)."""
    if isinstance(value, dict):
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        if props is None and extra is None:
            return []  # free-form here; the root metadata is the API server's ObjectMeta
        found = []
        for key, item in value.items():
            if props is not None and key in props:
                found += pruned_fields(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += pruned_fields(item, extra, f"{path}.{key}")
            else:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [f for i, item in enumerate(value) for f in pruned_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def check_manifest(text: str, run_dir: Path) -> dict:
    """Every check a manifest for the run in `run_dir` must pass; returns the TFJob."""
    description = json.loads((run_dir / "run.json").read_text())
    objects = list(yaml.safe_load_all(text))
    jobs = [o for o in objects if o["kind"] == "TFJob"]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["apiVersion"] == f"{CRD['spec']['group']}/{VERSION['name']}"
    assert job["kind"] == CRD["spec"]["names"]["kind"]
    assert schema_errors(job) == []
    assert pruned_fields(job, SCHEMA) == []
    name = job["metadata"]["name"]
    assert DNS_1123_LABEL.fullmatch(name) and name[0].isalpha() and len(name) <= 63
    specs = job["spec"]["tfReplicaSpecs"]
    expected = Counter(TFJOB_TYPES[t["type"]] for t in description["tasks"])
    assert {kind: spec["replicas"] for kind, spec in specs.items()} == dict(expected)
    for kind, spec in specs.items():
        assert all(len(f"{name}-{kind.lower()}-{i}") <= 63 for i in range(spec["replicas"]))  # pod/service names
        pod = spec["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == ["tensorflow"]  # where the operator puts TF_CONFIG
        container = pod["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert "TF_CONFIG" not in env  # the operator's to set
        assert env["TF_USE_LEGACY_KERAS"] == description["env"].get("TF_USE_LEGACY_KERAS", "1")
        assert all(env[k] == v for k, v in description["env"].items() if k != "TF_CONFIG")
        maps = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
        for mount in container.get("volumeMounts", []):
            if mount["name"] in maps:  # the files: each one from a ConfigMap of this same YAML, into workingDir
                configmap = next(o for o in objects if o["kind"] == "ConfigMap"
                                 and o["metadata"]["name"] == maps[mount["name"]])
                assert configmap["apiVersion"] == "v1"
                assert mount["subPath"] in {**configmap.get("data", {}), **configmap.get("binaryData", {})}
                assert mount["mountPath"] == f"{container['workingDir']}/{mount['subPath']}"
    return job


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    """A 2-worker run of main.py with a helper module, constructed (nothing starts) in a private runs folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(registry, "_RUNS", [])  # a run named main another test of this process launched is not it
    (tmp_path / "main.py").write_text("import helper\nprint(helper.GREETING)\n")
    (tmp_path / "helper.py").write_text("GREETING = 'hi'\n")
    run = Run("main.py", 2, files=["helper.py"], args="--epochs 3",
              env={"API_TOKEN": "s3cr3t-value", "DATA_DIR": "/data"})
    return run.dir


def test_run_exports_as_a_tfjob_the_operator_schema_accepts(job_dir):
    exported = export_run(job_dir, image="registry.example/kwnb-tf:2.21")
    job = check_manifest(exported.yaml, job_dir)
    assert list(yaml.safe_load_all(exported.yaml)) == exported.objects  # what is written is what was built
    container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/kwnb-tf:2.21"
    assert container["command"] + container["args"] == ["python", "main.py", "--epochs", "3"]
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert job["spec"]["runPolicy"] == {"backoffLimit": 3}
    configmap = exported.objects[1]
    assert configmap["data"] == {name: (job_dir / name).read_text() for name in ("main.py", "helper.py")}
    # The working directory itself is writable scratch: scripts write checkpoints to relative paths.
    volumes = {v["name"]: v for v in job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]}
    workdir_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == container["workingDir"])
    assert "emptyDir" in volumes[workdir_mount["name"]]


def test_secrets_warning_names_the_variables_but_never_their_values(job_dir):
    notes = export_run(job_dir, image="img:1").notes
    warning = [n for n in notes if "environment variables" in n]
    assert len(warning) == 1 and "API_TOKEN" in warning[0] and "DATA_DIR" in warning[0]
    assert not any("s3cr3t" in note or "/data" in note for note in notes)


def test_options_reach_the_manifest(job_dir):
    exported = export_run(job_dir, image="img:1", job_name="mnist-2w", namespace="team-a", restart_policy="ExitCode",
                          command='python -u main.py --epochs 5', cpu="2", memory="4Gi", gpus_per_pod=1,
                          workdir="/app")
    job = check_manifest(exported.yaml, job_dir)
    assert [o["metadata"]["namespace"] for o in exported.objects] == ["team-a", "team-a"]
    assert job["metadata"]["name"] == "mnist-2w"
    spec = job["spec"]["tfReplicaSpecs"]["Worker"]
    container = spec["template"]["spec"]["containers"][0]
    assert spec["restartPolicy"] == "ExitCode" and "runPolicy" not in job["spec"]  # backoffLimit is OnFailure's
    assert container["command"] == ["python", "-u", "main.py", "--epochs", "5"] and "args" not in container
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                      "limits": {"memory": "4Gi", "nvidia.com/gpu": 1}}
    assert container["workingDir"] == "/app"


@pytest.mark.parametrize("run_name, job_name", [
    ("My_Model.v2", "my-model-v2"),
    ("3d_unet", "kwnb-3d-unet"),
    ("x" * 80, "x" * 54),  # room left for "-worker-1" in pod and service names
])
def test_job_names_are_derived_as_dns_labels(tmp_path, run_name, job_name):
    (tmp_path / "main.py").write_text("print(1)\n")
    run = Run("main.py", 2, name=run_name, cwd=tmp_path, runs_dir=tmp_path / "runs")
    exported = export_run(run.dir, image="img:1")
    assert exported.name == job_name
    check_manifest(exported.yaml, run.dir)


@pytest.mark.parametrize("options, message", [
    (dict(image=None), "--image is required: an image with Python, TensorFlow and tf-keras of the same minor"),
    (dict(image="two words"), "--image must be an image reference"),
    (dict(image="img:1", job_name="Bad_Name"), "--job-name must be lowercase letters"),
    (dict(image="img:1", job_name="a" * 60), "at most 54 characters"),
    (dict(image="img:1", namespace="Team A"), "--namespace must be a DNS-1123 label"),
    (dict(image="img:1", cpu="lots"), "--cpu must be a Kubernetes quantity"),
    (dict(image="img:1", workdir="relative/dir"), "--workdir must be an absolute path"),
    (dict(image="img:1", restart_policy="Always"), "--restart-policy must be one of"),
    (dict(image="img:1", command="  "), "--command is empty"),
])
def test_bad_options_are_refused_with_what_to_do(job_dir, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        export_run(job_dir, **options)


def test_files_over_the_configmap_limit_are_refused_with_what_to_do_instead(job_dir):
    (job_dir / "helper.py").write_text("# padding\n" * 110_000)  # 1.05 MiB with main.py
    with pytest.raises(ValueError, match=r"more than a ConfigMap holds \(1 MiB\).*Bake them into the image.*--no-files"):
        export_run(job_dir, image="img:1")
    exported = export_run(job_dir, image="img:1", files=False, workdir="/app")
    job = check_manifest(exported.yaml, job_dir)
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert [o["kind"] for o in exported.objects] == ["TFJob"] and "volumes" not in pod
    assert pod["containers"][0]["workingDir"] == "/app"


def test_an_old_run_folder_with_chief_and_parameter_servers(tmp_path):
    """A folder written by hand, as an older session left it: types map to Chief/Worker/PS, counts follow."""
    folder = tmp_path / "ps_job-20240101-120000"
    folder.mkdir()
    tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in range(3)] + \
        [{"type": "ps", "index": i} for i in range(2)]
    (folder / "run.json").write_text(json.dumps({
        "name": "ps_job", "script": "train.py", "args": [], "tasks": tasks, "env": {"TF_CONFIG": "{}"},
        "files": ["model_lib.py"], "python": "/usr/bin/python3", "cwd": "/somewhere", "backend": "local",
        "gpus": True, "created": "2024-01-01T12:00:00+0000"}))
    (folder / "train.py").write_text("print('train')\n")
    with pytest.raises(ValueError, match="model_lib.py is part of the run but is missing from"):
        export_run(folder, image="img:1")
    (folder / "model_lib.py").write_bytes(b"W = b'\\xff'\n\xff\xfe binary tail")  # not UTF-8: binaryData
    exported = export_run(folder, image="img:1")
    job = check_manifest(exported.yaml, folder)
    assert job["metadata"]["name"] == "ps-job"
    assert {k: v["replicas"] for k, v in job["spec"]["tfReplicaSpecs"].items()} == {"Chief": 1, "Worker": 3, "PS": 2}
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"  # parameter servers never exit on their own
    import base64

    assert base64.b64decode(exported.objects[1]["binaryData"]["model_lib.py"]) == (folder / "model_lib.py").read_bytes()
    notes = " ".join(exported.notes)
    assert "TF_CONFIG" in notes and "--gpus-per-pod" in notes
    assert "ps tasks" not in notes  # its chief task is the coordinator: no Chief replica to add


def test_a_broken_run_json_gets_a_precise_message(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"name": "b", "script": "b.py", "tasks": [{"type": "master"}]}))
    with pytest.raises(ValueError, match="'tasks' must list"):
        export_run(folder, image="img:1")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a kwnb run folder: it has no run.json"):
        find_run_dir(tmp_path / "plain")


@pytest.mark.parametrize("breakage, expected", [
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="2"), "'2' is not of type 'integer'"),
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=2**31), "is not a 'int32'"),
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"].pop("containers"),
     "'containers' is a required property"),
    (lambda j: j["spec"].pop("tfReplicaSpecs"), "'tfReplicaSpecs' is a required property"),
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("name"),
     "'name' is a required property"),
])
def test_the_schema_check_fails_on_a_manifest_broken_on_purpose(job_dir, breakage, expected):
    job = copy.deepcopy(export_run(job_dir, image="img:1").objects[0])
    assert schema_errors(job) == []
    breakage(job)
    assert any(expected in error for error in schema_errors(job))


def test_the_field_check_catches_a_misspelled_field(job_dir):
    job = copy.deepcopy(export_run(job_dir, image="img:1").objects[0])
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["contaners"] = []
    assert schema_errors(job) == []  # structural schemas allow unknown fields: the API server prunes them
    assert pruned_fields(job, SCHEMA) == [".spec.tfReplicaSpecs.Worker.template.spec.contaners"]


def test_the_stored_schema_is_the_operators_tfjob_crd():
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    assert (CRD["kind"], CRD["metadata"]["name"]) == ("CustomResourceDefinition", "tfjobs.kubeflow.org")
    readme = (DATA / "README.md").read_text()
    assert "kubeflow/training-operator" in readme and "manifests/base/crds/kubeflow.org_tfjobs.yaml" in readme


def test_compare_upstream_tells_identical_from_different(tmp_path):
    """The script a reviewer runs against the upstream YAML: descriptions aside, it must see any change."""
    spec = importlib.util.spec_from_file_location("compare_upstream", DATA / "compare_upstream.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    upstream = copy.deepcopy(CRD)
    upstream["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "TFJob represents a TFJob resource."
    dump = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    (tmp_path / "crd.yaml").write_text("---\n" + yaml.dump(upstream, Dumper=dump))
    assert compare.compare(tmp_path / "crd.yaml") == []
    replicas = upstream["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "tfReplicaSpecs"]["additionalProperties"]["properties"]["replicas"]
    replicas["minimum"] = 1
    (tmp_path / "crd.yaml").write_text(yaml.dump(upstream, Dumper=dump))
    assert compare.compare(tmp_path / "crd.yaml") == [
        ".spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.tfReplicaSpecs.additionalProperties"
        ".properties.replicas.minimum: only upstream"]


# ----- the terminal -------------------------------------------------------------------------------------
def test_cli_prints_the_manifest_and_warns_on_stderr(job_dir, capsys):
    assert cli.main(["export", str(job_dir), "--to", "tfjob", "--image", "img:1"]) == 0
    out, err = capsys.readouterr()
    check_manifest(out, job_dir)
    assert "API_TOKEN" in err and "s3cr3t" not in err


def test_cli_finds_the_newest_run_of_a_name_and_writes_a_file(job_dir, tmp_path, capsys):
    newer = Run("main.py", 3, files=["helper.py"])  # same name, same second: the folder gets "-1"
    Run("main.py", 1, name="main-extra")  # a name that starts like it must not be taken for it
    assert cli.main(["export", "main", "--to", "tfjob", "--image", "img:1", "-o", "job.yaml"]) == 0
    out = capsys.readouterr().out
    assert "Wrote job.yaml" in out and "kubectl apply -f job.yaml" in out
    job = check_manifest((tmp_path / "job.yaml").read_text(), newer.dir)
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3
    assert job["metadata"]["annotations"]["kwnb/run"] == newer.dir.name


@pytest.mark.parametrize("argv, message", [
    (["export", "nosuchrun", "--to", "tfjob", "--image", "img:1"], "kwnb: no run named 'nosuchrun'"),
    (["export", "main", "--to", "tfjob"], "kwnb: --image is required: an image with Python, TensorFlow and tf-keras"),
])
def test_cli_errors_exit_2_with_one_line(job_dir, capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_cli_knows_only_tfjob_for_now(job_dir, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["export", "main", "--to", "helm", "--image", "img:1"])
    assert stop.value.code == 2 and "invalid choice: 'helm'" in capsys.readouterr().err


# ----- the magic ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the shell test_magics.py uses too, whichever module runs first
    shell.run_line_magic("load_ext", "kwnb")
    return shell


def test_magic_exports_a_run_of_this_kernel(ip, job_dir, tmp_path, capsys, monkeypatch):
    run = Run("main.py", 2, files=["helper.py"], name="kernelrun")
    monkeypatch.setattr(registry, "_RUNS", [run])  # as if launched here; nothing needs to run for an export
    ip.run_line_magic("kw_export", "kernelrun --to tfjob --image img:1")
    out = capsys.readouterr().out
    assert "Wrote kernelrun-tfjob.yaml" in out and "kubectl apply -f kernelrun-tfjob.yaml" in out
    check_manifest((tmp_path / "kernelrun-tfjob.yaml").read_text(), run.dir)


def test_magic_exports_a_folder_with_a_quoted_command(ip, job_dir, tmp_path, capsys):
    ip.run_line_magic("kw_export", f'{job_dir} --to tfjob --image img:1 -o out.yaml --command "python -u main.py"')
    assert "kubectl apply -f out.yaml" in capsys.readouterr().out
    job = check_manifest((tmp_path / "out.yaml").read_text(), job_dir)
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] == \
        ["python", "-u", "main.py"]


@pytest.mark.parametrize("line, message", [
    ("main --to tfjob", "--image is required: an image with Python, TensorFlow and tf-keras"),
    ("nosuchrun --to tfjob --image img:1", "no run named 'nosuchrun'"),
    ("main --to helm --image img:1", "invalid choice: 'helm'"),
    ("main --image img:1", "the following arguments are required: --to"),
])
def test_magic_errors_are_one_usage_error(ip, job_dir, tmp_path, line, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        ip.run_line_magic("kw_export", line)
    assert not list(tmp_path.glob("*.yaml"))


def test_magic_refuses_oversized_files(ip, job_dir, tmp_path):
    (job_dir / "main.py").write_text("x = 1\n" * 200_000)
    with pytest.raises(UsageError, match=r"more than a ConfigMap holds \(1 MiB\)"):
        ip.run_line_magic("kw_export", "main --to tfjob --image img:1")
    assert not list(tmp_path.glob("*.yaml"))


def test_a_run_with_a_chief_task_and_an_evaluator_exports_every_role(tmp_path, monkeypatch):
    """`--chief --evaluator` (issue 24): Chief, Worker and Evaluator replicas; the operator gives each its
    TF_CONFIG, and pods still running when the chief ends (the evaluator) are cleaned up."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "main.py").write_text("print('train')\n")
    run = Run("main.py", 2, chief=True, evaluator=True, ps=1, runs_dir=tmp_path / "runs")
    exported = export_run(run.dir, image="img:1")
    job = check_manifest(exported.yaml, run.dir)
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Chief", "Worker", "PS", "Evaluator"]
    assert {k: v["replicas"] for k, v in job["spec"]["tfReplicaSpecs"].items()} == \
        {"Chief": 1, "Worker": 2, "PS": 1, "Evaluator": 1}
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert "coordinator" not in " ".join(exported.notes)  # the chief task is the coordinator here
    notebook_coordinated = Run("main.py", 2, ps=1, name="ps_only", runs_dir=tmp_path / "runs")
    assert "add a Chief replica" in " ".join(export_run(notebook_coordinated.dir, image="img:1").notes)
