"""kwnb export --to job: an Indexed Job + headless Service + ConfigMap that Kubernetes' own schemas accept.

No Kubernetes runs here, so the manifest is checked, not run: against the JSON schemas of Job, Service
and ConfigMap of Kubernetes 1.26 and 1.37 (tests/data/k8s, see its README), strict (an unknown field is
an error, as with kubectl's default server-side validation); then for what those schemas cannot say
(names, labels that must match, indices); and the entry point each pod runs is run here, once per
index, from the files as the pod would see them, to compare its TF_CONFIG with the engine's. The checks
themselves are tests/k8s_job_checks.py's.
"""
import copy
import importlib.util
import json
import re
import zipfile
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
from kwnb.export import EXPORT_ARGUMENTS, export_run, job, tfjob
from k8s_job_checks import (DATA, VALIDATORS, by_kind, check_manifest, engine_tf_config, problems, run_pod,
                             schema_errors)

PRINTING_SCRIPT = """import json, os, sys
import helper
print(json.dumps({"tf_config": os.environ["TF_CONFIG"], "argv": sys.argv, "name": __name__, "cwd": os.getcwd(),
                  "path0": sys.path[0], "helper": helper.GREETING, "kwnb": "kwnb" in sys.modules}))
"""


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    """A 2-worker run of a script that prints what it was given, with a helper module (nothing starts)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(registry, "_RUNS", [])  # a run named main another test of this process launched is not it
    (tmp_path / "main.py").write_text(PRINTING_SCRIPT)
    (tmp_path / "helper.py").write_text("GREETING = 'hi'\n")
    run = Run("main.py", 2, files=["helper.py"], args="--epochs 3", env={"API_TOKEN": "s3cr3t", "DATA_DIR": "/data"})
    return run.dir


def hand_written_run(folder: Path, tasks: list[dict], files: dict[str, str]) -> Path:
    """A run folder as an older session left it: run.json written by hand, as test_export.py does."""
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({
        "name": folder.name.split("-")[0], "script": "main.py", "args": ["--lr", "0.1"], "tasks": tasks, "env": {},
        "files": [f for f in files if f != "main.py"], "gpus": False}))
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_run_exports_as_objects_the_kubernetes_schemas_accept(job_dir):
    exported = export_run(job_dir, to="job", image="registry.example/kwnb-tf:2.21")
    objects = check_manifest(exported.yaml, job_dir)
    assert list(yaml.safe_load_all(exported.yaml)) == exported.objects  # what is written is what was built
    assert exported.kind == "Indexed Job" and exported.name == "main" and exported.yaml.startswith("# Kubernetes")
    container = objects["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/kwnb-tf:2.21"
    assert container["command"] + container["args"] == ["python", "/kwnb/entry/k8s_entry.py", "main.py", "--epochs", "3"]
    assert objects["Job"]["spec"]["backoffLimit"] == 6
    assert objects["Job"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    data = objects["ConfigMap"]["data"]
    assert {k: data[k] for k in ("main.py", "helper.py")} == {n: (job_dir / n).read_text() for n in ("main.py", "helper.py")}
    repo_task = Path(job.__file__).parents[1] / "task"
    assert data["kwnb.k8s_entry.py"] == (repo_task / "k8s_entry.py").read_text()  # shipped as it is in kwnb
    assert data["kwnb.tf_config.py"] == (repo_task / "tf_config.py").read_text()
    notes = " ".join(exported.notes)
    assert "API_TOKEN" in notes and "s3cr3t" not in notes and "never completes" not in notes


def test_each_pod_builds_the_tf_config_the_engine_would_and_runs_the_script(job_dir, tmp_path):
    exported = export_run(job_dir, to="job", image="img:1")
    objects = check_manifest(exported.yaml, job_dir)
    description = json.loads((job_dir / "run.json").read_text())
    for index in range(2):
        result = run_pod(objects, index, tmp_path / f"pod-{index}")
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        assert json.loads(seen["tf_config"]) == engine_tf_config(objects, description, index)
        # As `python main.py --epochs 3` in the working directory would run it, and without kwnb.
        workdir = tmp_path / f"pod-{index}" / "kwnb" / "job"
        assert seen["argv"] == ["main.py", "--epochs", "3"] and seen["name"] == "__main__"
        assert Path(seen["cwd"]) == workdir and Path(seen["path0"]) == workdir and seen["helper"] == "hi"
        assert not seen["kwnb"]
        assert f"kwnb: this pod is worker {index} at main-{index}.main:2222" in result.stderr


@pytest.mark.parametrize("tasks", [
    [("worker", 0)],
    [("worker", 0), ("worker", 1), ("ps", 0)],
    [("chief", 0), ("worker", 0), ("worker", 1), ("worker", 2), ("ps", 0), ("ps", 1)],
    [("chief", 0), ("worker", 0), ("evaluator", 0)],  # the evaluator's pod is outside the cluster it is told of
    [("worker", i) for i in range(12)],  # two-digit indices: hostnames main-10, main-11
])
def test_every_index_gets_the_engines_tf_config(tmp_path, tasks):
    folder = hand_written_run(tmp_path / "main-20240101-120000", [{"type": t, "index": i} for t, i in tasks],
                              {"main.py": PRINTING_SCRIPT, "helper.py": "GREETING = 'hi'\n"})
    objects = check_manifest(export_run(folder, to="job", image="img:1").yaml, folder)
    description = json.loads((folder / "run.json").read_text())
    indices = range(len(tasks)) if len(tasks) < 12 else (0, 9, 10, 11)  # 12 runs would add nothing
    for index in indices:
        result = run_pod(objects, index, tmp_path / f"pod-{index}")
        assert result.returncode == 0, result.stderr
        assert json.loads(json.loads(result.stdout)["tf_config"]) == engine_tf_config(objects, description, index)


def test_a_command_gets_the_tf_config_too(job_dir, tmp_path):
    """--command: the entry point runs it with TF_CONFIG set (here python -u, which is no .py file)."""
    exported = export_run(job_dir, to="job", image="img:1", command='python -u main.py --epochs 5')
    objects = check_manifest(exported.yaml, job_dir)
    assert objects["Job"]["spec"]["template"]["spec"]["containers"][0]["args"] == \
        ["python", "-u", "main.py", "--epochs", "5"]
    result = run_pod(objects, 1, tmp_path / "pod")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["argv"] == ["main.py", "--epochs", "5"]
    assert json.loads(seen["tf_config"])["task"] == {"type": "worker", "index": 1}


@pytest.mark.parametrize("env, message", [
    ({"JOB_COMPLETION_INDEX": None}, "'JOB_COMPLETION_INDEX' is not set"),
    ({"JOB_COMPLETION_INDEX": "2"}, "cannot build TF_CONFIG: JOB_COMPLETION_INDEX=2, but the job has 2 tasks"),
    ({"KWNB_K8S_TASKS": "worker:0,master:1"}, "cannot build TF_CONFIG: a task is named TYPE:INDEX"),
    ({"KWNB_K8S_PORT": "grpc"}, "cannot build TF_CONFIG: invalid literal for int()"),
])
def test_the_entry_point_fails_with_one_line_outside_its_job(job_dir, tmp_path, env, message):
    objects = by_kind(export_run(job_dir, to="job", image="img:1").objects)
    result = run_pod(objects, 0, tmp_path / "pod", **env)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"kwnb: {message}") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("policy, limit, pod_policy, job_limit", [
    ("OnFailure", None, "OnFailure", 6),  # 3 per task: one task's failure fails its peers too
    ("OnFailure", 8, "OnFailure", 8),
    ("ExitCode", 5, "Never", 5),
    ("Never", None, "Never", 0),
])
def test_restart_policies(job_dir, policy, limit, pod_policy, job_limit):
    options = {} if limit is None else {"backoff_limit": limit}
    exported = export_run(job_dir, to="job", image="img:1", restart_policy=policy, **options)
    spec = check_manifest(exported.yaml, job_dir)["Job"]["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == pod_policy and spec["backoffLimit"] == job_limit
    assert "backoffLimitPerIndex" not in spec  # see docs/scaling-out.md: one failure brings every worker down
    if policy != "ExitCode":
        assert "podFailurePolicy" not in spec
        return
    [rule] = spec["podFailurePolicy"]["rules"]
    codes = rule["onExitCodes"]
    # The script's own failure (1-127) fails the job; 128 + a signal (preempted, OOM-killed) does not.
    assert rule["action"] == "FailJob" and codes["operator"] == "NotIn" and codes["containerName"] == "tensorflow"
    assert codes["values"] == list(range(128, 256))  # sorted, unique, at most 255: the API server's rules
    assert "values: [128, 129," in exported.yaml  # one flow-style list, not 128 lines


def test_options_reach_the_manifest(job_dir):
    exported = export_run(job_dir, to="job", image="img:1", job_name="mnist-2w", namespace="team-a", cpu="2",
                          memory="4Gi", gpus_per_pod=1, workdir="/app")
    objects = check_manifest(exported.yaml, job_dir)
    assert {o["metadata"]["namespace"] for o in exported.objects} == {"team-a"}
    assert objects["Service"]["metadata"]["name"] == objects["Job"]["metadata"]["name"] == "mnist-2w"
    container = objects["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                      "limits": {"memory": "4Gi", "nvidia.com/gpu": 1}}
    assert container["workingDir"] == "/app" and {"name": "KWNB_K8S_JOB", "value": "mnist-2w"} in container["env"]


def test_no_files_keeps_only_the_entry_point_and_the_images_workdir(job_dir, tmp_path):
    exported = export_run(job_dir, to="job", image="img:1", files=False, workdir="/app")
    objects = check_manifest(exported.yaml, job_dir)
    assert sorted(objects["ConfigMap"]["data"]) == ["kwnb.k8s_entry.py", "kwnb.tf_config.py"]
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert [v for v in pod["volumes"] if "emptyDir" in v] == []  # it would hide the image's /app
    assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} == \
        {"/kwnb/entry/k8s_entry.py", "/kwnb/entry/tf_config.py"}
    assert any("--no-files" in note and "entry point" in note for note in exported.notes)
    # The image's own files, where the ConfigMap would have put them.
    for name in ("main.py", "helper.py"):
        (tmp_path / "pod" / "app").mkdir(parents=True, exist_ok=True)
        (tmp_path / "pod" / "app" / name).write_text((job_dir / name).read_text())
    result = run_pod(objects, 0, tmp_path / "pod")
    assert result.returncode == 0, result.stderr
    assert json.loads(json.loads(result.stdout)["tf_config"])["task"] == {"type": "worker", "index": 0}


def test_parameter_servers_and_gpus_get_notes(tmp_path):
    folder = hand_written_run(tmp_path / "psjob-20240101-120000",
                              [{"type": "worker", "index": 0}, {"type": "ps", "index": 0}], {"main.py": "print(1)\n"})
    data = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**data, "gpus": True}))
    notes = " ".join(export_run(folder, to="job", image="img:1").notes)
    assert "coordinator" in notes and "never completes" in notes and "kwnb/job=psjob" in notes
    assert "--gpus-per-pod" in notes


@pytest.mark.parametrize("tasks, run_name, expected", [
    (2, "My_Model.v2", "my-model-v2"),
    (2, "3d_unet", "kwnb-3d-unet"),
    (2, "x" * 80, "x" * 61),  # room for "-1": the last pod's hostname x...x-1 has 63 characters
    (12, "x" * 80, "x" * 60),  # "-11"
])
def test_job_names_leave_room_for_the_hostnames(tmp_path, tasks, run_name, expected):
    (tmp_path / "main.py").write_text("print(1)\n")
    run = Run("main.py", tasks, name=run_name, cwd=tmp_path, runs_dir=tmp_path / "runs")
    exported = export_run(run.dir, to="job", image="img:1")
    assert exported.name == expected
    check_manifest(exported.yaml, run.dir)


@pytest.mark.parametrize("options, message", [
    (dict(image=None), "--image is required"),
    (dict(job_name="a" * 62), "at most 61 characters"),
    (dict(job_name="1st"), "--job-name must be lowercase letters, digits and '-', start with a letter"),
    (dict(restart_policy="Always"), "--restart-policy must be one of OnFailure, ExitCode, Never"),
    (dict(restart_policy="Never", backoff_limit=2), "--backoff-limit does not go with --restart-policy Never"),
    (dict(backoff_limit=-1), "--backoff-limit must be 0 or more"),
    (dict(workdir="/kwnb/entry"), "--workdir must be outside /kwnb/entry"),
    (dict(workdir="/kwnb"), "--workdir must be outside /kwnb/entry"),
    (dict(command="python 'unclosed"), "--command: No closing quotation"),
])
def test_bad_options_are_refused_with_one_line(job_dir, options, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        export_run(job_dir, to="job", **{"image": "img:1", **options})
    assert "\n" not in str(error.value)


def test_a_file_named_like_kwnbs_own_is_refused(tmp_path):
    folder = hand_written_run(tmp_path / "clash-20240101-120000", [{"type": "worker", "index": 0}],
                              {"main.py": "print(1)\n", "kwnb.k8s_entry.py": "x = 1\n"})
    with pytest.raises(ValueError, match="a file named kwnb.k8s_entry.py, which kwnb needs for its own: rename it"):
        export_run(folder, to="job", image="img:1")


# ----- the checks can fail ------------------------------------------------------------------------------
def _pod(objects):
    return objects["Job"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("kind, breakage, expected", [
    ("Job", lambda o: o["Job"]["spec"].update(completions="2"), "'2' is not of type 'integer', 'null'"),
    ("Job", lambda o: o["Job"]["spec"].update(parallelism=2**31), "is not a 'int32'"),
    ("Job", lambda o: _pod(o).pop("containers"), "'containers' is a required property"),
    ("Job", lambda o: _pod(o).update(subdomian="main"), "'subdomian' was unexpected"),  # strict: no pruning
    ("Job", lambda o: o["Job"]["spec"].update(backoffLimitPerIndex=1), "v1.26.0 spec: Additional properties"),
    ("Service", lambda o: o["Service"]["spec"]["ports"][0].pop("port"), "'port' is a required property"),
    ("Service", lambda o: o["Service"]["spec"].update(clusterIP=None, selector="main"), "'main' is not of type"),
    ("ConfigMap", lambda o: o["ConfigMap"].update(binaryData={"x": "not base64!"}), "is not a 'byte'"),
    ("ConfigMap", lambda o: o["ConfigMap"].update(kind="Secret"), "'Secret' is not one of ['ConfigMap']"),
])
def test_the_schema_check_fails_on_objects_broken_on_purpose(job_dir, kind, breakage, expected):
    objects = by_kind(copy.deepcopy(export_run(job_dir, to="job", image="img:1").objects))
    assert schema_errors(objects[kind]) == []
    breakage(objects)
    errors = schema_errors(objects[kind], kind)
    assert any(expected in error for error in errors), errors


@pytest.mark.parametrize("breakage, expected", [
    (lambda o: o["Service"]["spec"].update(selector={"kwnb/job": "other"}), "does not select the pods"),
    (lambda o: _pod(o).update(subdomain="other"), "pod subdomain 'other' is not the Service's name 'main'"),
    (lambda o: o["Job"]["spec"].update(completions=3), "completions = parallelism = 2 tasks"),
    (lambda o: o["Job"]["spec"].update(completionMode="NonIndexed"), "not an Indexed Job"),
    (lambda o: o["Job"]["metadata"].update(name="x" * 62), "hostname 'xxxxxxxxxx"),
    (lambda o: o["Service"]["spec"].pop("clusterIP"), "not headless"),
    (lambda o: o["Service"]["spec"]["ports"][0].update(targetPort=2223), "do not reach the container's [2222]"),
    (lambda o: _pod(o)["containers"][0]["volumeMounts"].pop(), "ConfigMap key 'kwnb.tf_config.py' is not mounted"),
    (lambda o: _pod(o)["containers"][0]["command"].__setitem__(1, "/elsewhere.py"), "does not run the mounted entry"),
    (lambda o: o["Service"]["metadata"].update(namespace="b"), "different namespaces"),
    (lambda o: o["Job"]["spec"].update(podFailurePolicy={"rules": []}), "podFailurePolicy needs restartPolicy Never"),
    (lambda o: _pod(o)["containers"][0]["env"].append({"name": "TF_CONFIG", "value": "{}"}), "TF_CONFIG is set"),
])
def test_the_other_checks_fail_on_objects_broken_on_purpose(job_dir, breakage, expected):
    objects = copy.deepcopy(export_run(job_dir, to="job", image="img:1").objects)
    description = json.loads((job_dir / "run.json").read_text())
    assert problems(objects, description) == []
    breakage(by_kind(objects))
    found = problems(objects, description)
    assert any(expected in problem for problem in found), found


def test_the_stored_schemas_are_kubernetes_job_service_and_configmap():
    for (version, kind), validator in VALIDATORS.items():
        jsonschema.Draft202012Validator.check_schema(validator.schema)
        assert [g["kind"] for g in validator.schema["x-kubernetes-group-version-kind"]] == [kind]
        assert validator.schema["additionalProperties"] is False  # strict
    job_spec = VALIDATORS["v1.37.0", "Job"].schema["$defs"]["io.k8s.api.batch.v1.JobSpec"]["properties"]
    assert "podFailurePolicy" in job_spec and "podFailurePolicy" in \
        VALIDATORS["v1.26.0", "Job"].schema["$defs"]["io.k8s.api.batch.v1.JobSpec"]["properties"]
    readme = (DATA / "README.md").read_text()
    assert "kubernetes-validate" in readme and "1.37.0" in readme and "85136d018a27b50e" in readme


def test_the_extraction_script_makes_self_contained_schemas(tmp_path):
    """extract.py, which made the files here from the package's wheel, on a wheel made up for the test."""
    spec = importlib.util.spec_from_file_location("extract", DATA / "extract.py")
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)
    shared = "/api/_definitions.json#/$defs/"
    definitions = {"$defs": {
        "A": {"description": "doc", "properties": {"b": {"$ref": "#/$defs/B"}}, "additionalProperties": False},
        "B": {"type": "object", "properties": {"description": {"type": "string"}}},  # a field named description
        "Unused": {"type": "string"}}}
    root = {"$id": "https://kubernetes.io/api/thing/v1", "description": "doc", "properties": {"a": {"$ref": shared + "A"}}}
    wheel = tmp_path / "k.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{extract.ROOT}/v9.9.0-local-strict/_definitions.json", json.dumps(definitions))
        archive.writestr(f"{extract.ROOT}/v9.9.0-local-strict/thing-v1.json", json.dumps(root))
    [path] = extract.extract(wheel, tmp_path / "out", versions=("v9.9.0",), kinds=("thing-v1",))
    assert json.loads(path.read_text()) == {
        "$id": "https://kubernetes.io/api/thing/v1", "properties": {"a": {"$ref": "#/$defs/A"}},
        "$defs": {"A": {"properties": {"b": {"$ref": "#/$defs/B"}}, "additionalProperties": False},
                  "B": {"type": "object", "properties": {"description": {"type": "string"}}}}}


# ----- the terminal and the notebook --------------------------------------------------------------------
def test_export_arguments_serve_both_targets():
    to = next(kwargs for args, kwargs in EXPORT_ARGUMENTS if args == ("--to",))
    restart = next(kwargs for args, kwargs in EXPORT_ARGUMENTS if args == ("--restart-policy",))
    assert to["choices"] == ("tfjob", "job")
    assert tuple(restart["choices"]) == tfjob.RESTART_POLICIES == job.RESTART_POLICIES


def test_cli_writes_the_job_and_leaves_the_tfjob_as_it_was(job_dir, tmp_path, capsys):
    assert cli.main(["export", "main", "--to", "job", "--image", "img:1", "--restart-policy", "ExitCode"]) == 0
    out, err = capsys.readouterr()
    assert check_manifest(out, job_dir)["Job"]["spec"]["podFailurePolicy"]
    assert "API_TOKEN" in err and "s3cr3t" not in err
    assert cli.main(["export", "main", "--to", "tfjob", "--image", "img:1"]) == 0
    tfjob_objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert tfjob_objects[0]["spec"]["runPolicy"] == {"backoffLimit": 3}  # its default, --backoff-limit not given
    assert cli.main(["export", "main", "--to", "job", "--image", "img:1", "--restart-policy", "Never",
                     "--backoff-limit", "1"]) == 2
    assert capsys.readouterr().err.startswith("kwnb: --backoff-limit does not go with --restart-policy Never")


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the shell test_magics.py uses too, whichever module runs first
    shell.run_line_magic("load_ext", "kwnb")
    return shell


def test_magic_writes_name_job_yaml(ip, job_dir, tmp_path, capsys):
    ip.run_line_magic("kw_export", "main --to job --image img:1 --no-files")
    assert "kubectl apply -f main-job.yaml" in capsys.readouterr().out
    objects = check_manifest((tmp_path / "main-job.yaml").read_text(), job_dir)
    assert sorted(objects["ConfigMap"]["data"]) == ["kwnb.k8s_entry.py", "kwnb.tf_config.py"]
    with pytest.raises(UsageError, match="--workdir must be outside /kwnb/entry"):
        ip.run_line_magic("kw_export", "main --to job --image img:1 --workdir /kwnb/entry")


def test_a_run_with_a_chief_task_and_an_evaluator_exports_every_role(tmp_path, monkeypatch):
    """`--chief --evaluator` (issue 24): one pod per task, chief first and the evaluator last; the
    evaluator's TF_CONFIG names the training cluster without it, as TensorFlow documents for a sidecar."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "main.py").write_text(PRINTING_SCRIPT)
    (tmp_path / "helper.py").write_text("GREETING = 'hi'\n")
    run = Run("main.py", 2, files=["helper.py"], chief=True, evaluator=True, runs_dir=tmp_path / "runs")
    exported = export_run(run.dir, to="job", image="img:1")
    objects = check_manifest(exported.yaml, run.dir)
    description = json.loads((run.dir / "run.json").read_text())
    assert [(t["type"], t["index"]) for t in description["tasks"]] == \
        [("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]
    assert objects["Job"]["spec"]["completions"] == 4
    notes = " ".join(exported.notes)
    assert "coordinator" not in notes and "max_evaluations" in notes
    seen = {}
    for index in (0, 3):
        result = run_pod(objects, index, tmp_path / f"pod-{index}")
        assert result.returncode == 0, result.stderr
        seen[index] = json.loads(json.loads(result.stdout)["tf_config"])
    assert seen[0] == {"cluster": {"chief": ["main-0.main:2222"], "worker": ["main-1.main:2222", "main-2.main:2222"]},
                       "task": {"type": "chief", "index": 0}}
    assert seen[3] == {"cluster": seen[0]["cluster"], "task": {"type": "evaluator", "index": 0}}
