"""What every task's environment holds, pinned variable by variable and in order: a local 2-worker run's
tasks (as the tasks themselves see it), the warm pool's first interpreters, the Slurm job, the pods of
both Kubernetes exports and the doctor's probe. Each expectation is written out here, not computed by
kwnb, so that a change to the one builder (kwnb/machine/task_env.py) that changes what a task gets fails.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest

import kwnb
from kwnb import doctor
from kwnb.backends.slurm import SlurmLauncher
from kwnb.backends.warm import POOL
from kwnb.engine.live.run import Run
from kwnb.export import export_run
from kwnb.machine import task_env
from kwnb.machine.limits import read_limits

pytestmark = pytest.mark.usefixtures("stop_leftover_runs")

SHOW_ENV = "import json, os\nprint('ENV ' + json.dumps(list(os.environ.items())))\n"


def private_temp() -> str:
    return os.path.join(tempfile.gettempdir(), f"kwnb-{os.geteuid()}")


def threads(tasks: int) -> dict[str, str]:
    share = max(1, int(read_limits().cpus // tasks))
    return {"TF_NUM_INTRAOP_THREADS": str(share), "TF_NUM_INTEROP_THREADS": str(max(2, share)),
            "OMP_NUM_THREADS": str(share), "PJRT_NPROC": str(share)}


def seen_by_tasks(tmp_path, **options) -> tuple[kwnb.Run, list[list]]:
    (tmp_path / "show.py").write_text(SHOW_ENV)
    run = kwnb.launch(tmp_path / "show.py", n=2, cwd=tmp_path, runs_dir=tmp_path / "runs", network="host",
                      timeout=60, **options)
    assert run.wait(60) == [0, 0], run.summary()
    return run, [json.loads(next(line for line in run.logs(i).splitlines() if line.startswith("ENV "))[4:])
                 for i in range(2)]


def tf_config_of(run, position: int) -> str:
    return json.dumps(run.workers[position].tf_config)  # what kwnb gave the task at its launch


def test_a_local_runs_tasks_get_the_session_and_kwnbs_variables(tmp_path, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as a kernel's
    run, seen = seen_by_tasks(tmp_path)
    for position, items in enumerate(seen):
        # KWNB_PARENT_PID is the bootstrap's, which takes it out of the script's environment.
        expected = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                    "CUDA_VISIBLE_DEVICES": "-1", "KWNB_RUN_DIR": str(run.dir), "KWNB_WORKER": str(position),
                    "TF_CONFIG": tf_config_of(run, position), **threads(2),
                    "TMPDIR": private_temp(), "TEMP": private_temp(), "TMP": private_temp()}
        assert items == [list(item) for item in expected.items()]


def jax_cluster(run, position: int) -> dict[str, str]:
    coordinator = run.workers[0].tf_config["cluster"]["worker"][0]  # task 0's address, where kwnb placed it
    assert coordinator.startswith("localhost:")
    return {"KERAS_DISTRIBUTION_JOB_ADDRESSES": coordinator, "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
            "KERAS_DISTRIBUTION_PROCESS_ID": str(position), "JAX_COORDINATOR_BIND_ADDRESS": coordinator}


def test_a_jax_runs_tasks_get_keras_on_jax_and_its_coordinator_not_tf_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    for name in ("KERAS_BACKEND", "JAX_PLATFORMS", "TF_USE_LEGACY_KERAS"):
        monkeypatch.delenv(name, raising=False)
    run, seen = seen_by_tasks(tmp_path, framework="jax")
    for position, items in enumerate(seen):
        expected = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
                    "MPLBACKEND": "Agg", "CUDA_VISIBLE_DEVICES": "-1", "KWNB_RUN_DIR": str(run.dir),
                    "KWNB_WORKER": str(position), **jax_cluster(run, position), **threads(2),
                    "TMPDIR": private_temp(), "TEMP": private_temp(), "TMP": private_temp()}
        assert items == [list(item) for item in expected.items()]


def test_a_jax_run_with_gpus_gives_each_task_one_device_and_no_preallocation(tmp_path, monkeypatch):
    for name in ("KERAS_BACKEND", "JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # TensorFlow's tasks would take two each
    run, seen = seen_by_tasks(tmp_path, framework="jax", gpus=True)
    for position, items in enumerate(seen):
        expected = {**os.environ, "KERAS_BACKEND": "jax", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                    "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "KWNB_RUN_DIR": str(run.dir),
                    "KWNB_WORKER": str(position), **jax_cluster(run, position), "CUDA_VISIBLE_DEVICES": str(position)}
        assert [item for item in items if item[0] not in (*threads(2), "TMPDIR", "TEMP", "TMP")] == \
            [list(item) for item in expected.items()]


def test_the_users_env_wins_but_gpu_placement_wins_over_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    own = tmp_path / "own-tmp"
    own.mkdir()
    user = {"MPLBACKEND": "pdf", "OMP_NUM_THREADS": "3", "TMPDIR": str(own), "DATA": "x",
            "CUDA_VISIBLE_DEVICES": "3"}  # the pool to choose from: one GPU for two tasks, shared, with memory growth
    run, seen = seen_by_tasks(tmp_path, env=user, gpus=True)
    for position, items in enumerate(seen):
        expected = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                    "KWNB_RUN_DIR": str(run.dir), "KWNB_WORKER": str(position),
                    "TF_CONFIG": tf_config_of(run, position), **user,
                    "CUDA_VISIBLE_DEVICES": "3", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        assert items == [list(item) for item in expected.items()]


def test_the_warm_pool_prepares_a_default_runs_environment(tmp_path, monkeypatch):
    from kwnb.backends.prewarm import prewarm

    monkeypatch.setenv("KWNB_WARM", "1")
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.chdir(tmp_path)
    prepared = []
    monkeypatch.setattr(POOL, "prepare", lambda python, env, cwd, count, private, **imports: prepared.append((python, env, count)))
    prewarm(2).join(30)
    expected = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                "CUDA_VISIBLE_DEVICES": "-1", **threads(2),
                "TMPDIR": private_temp(), "TEMP": private_temp(), "TMP": private_temp()}
    assert [(python, list(env.items()), count) for python, env, count in prepared] == \
        [(sys.executable, list(expected.items()), 2)]


FAKE_SBATCH = """#!{python}
import json, os, sys
open({out!r}, "w").write(json.dumps(list(os.environ.items())))
print("4242")
"""


def test_a_slurm_job_gets_the_tasks_environment_less_what_is_per_task(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH.format(python=sys.executable, out=str(tmp_path / "sbatch-env.json")))
    for name, text in (("squeue", "#!/bin/sh\n"), ("scancel", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # the notebook's own allocation: not passed on
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")  # passed on
    (tmp_path / "show.py").write_text(SHOW_ENV)
    run = kwnb.launch(tmp_path / "show.py", n=2, cwd=tmp_path, runs_dir=tmp_path / "runs", env={"DATA": "x"},
                      launcher=SlurmLauncher())
    run.stop()
    items = json.loads((tmp_path / "sbatch-env.json").read_text())
    given = dict(items)
    session = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    tasks = [{"type": "worker", "index": i, "log": str(run.dir / f"worker-{i}.log")} for i in range(2)]
    expected = {**session, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                "CUDA_VISIBLE_DEVICES": "-1", "KWNB_RUN_DIR": str(run.dir), "DATA": "x",
                "KWNB_SLURM_TASKS": json.dumps(tasks), "KWNB_SLURM_PORT_BASE": given.get("KWNB_SLURM_PORT_BASE"),
                "KWNB_SLURM_HEARTBEAT": str(run.dir / "slurm-heartbeat")}
    assert 20000 <= int(given["KWNB_SLURM_PORT_BASE"]) < 32000
    # sbatch itself may add variables of its own to a child (a Python adds none): compare what kwnb passed.
    assert items[:len(expected)] == [list(item) for item in expected.items()]


@pytest.fixture
def exported_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "main.py").write_text("print('hi')\n")
    return Run("main.py", 2, runs_dir=tmp_path / "runs",
               env={"API_TOKEN": "s3cr3t", "TF_CONFIG": "{}", "PYTHONUNBUFFERED": "0"}).dir


def test_the_pods_of_an_indexed_job_get_kwnbs_variables_for_everywhere(exported_run):
    exported = export_run(exported_run, to="job", image="img:1")
    job = next(o for o in exported.objects if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "TF_USE_LEGACY_KERAS", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "0"},
        {"name": "API_TOKEN", "value": "s3cr3t"}, {"name": "KWNB_K8S_TASKS", "value": "worker:0,worker:1"},
        {"name": "KWNB_K8S_JOB", "value": "main"}, {"name": "KWNB_K8S_SERVICE", "value": "main"},
        {"name": "KWNB_K8S_PORT", "value": "2222"}]
    assert any("left out the run's TF_CONFIG" in note for note in exported.notes)


def test_the_pods_of_a_tfjob_get_the_same_less_the_entry_points(exported_run):
    exported = export_run(exported_run, to="tfjob", image="img:1")
    (spec,) = next(o for o in exported.objects if o["kind"] == "TFJob")["spec"]["tfReplicaSpecs"].values()
    assert spec["template"]["spec"]["containers"][0]["env"] == [
        {"name": "TF_USE_LEGACY_KERAS", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "0"},
        {"name": "API_TOKEN", "value": "s3cr3t"}]


def test_the_pods_of_a_jax_runs_job_get_keras_on_jax_and_no_tf_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "main.py").write_text("print('hi')\n")
    run_dir = Run("main.py", 2, runs_dir=tmp_path / "runs", framework="jax",
                  env={"KERAS_DISTRIBUTION_PROCESS_ID": "7", "DATA": "x"}).dir
    entry = [{"name": "KWNB_K8S_TASKS", "value": "worker:0,worker:1"}, {"name": "KWNB_K8S_JOB", "value": "main"},
             {"name": "KWNB_K8S_SERVICE", "value": "main"}, {"name": "KWNB_K8S_PORT", "value": "2222"}]
    for gpus_per_pod, by_gpus in ((0, {"name": "JAX_PLATFORMS", "value": "cpu"}),
                                  (1, {"name": "XLA_PYTHON_CLIENT_PREALLOCATE", "value": "false"})):
        exported = export_run(run_dir, to="job", image="img:1", gpus_per_pod=gpus_per_pod)
        job = next(o for o in exported.objects if o["kind"] == "Job")
        assert job["spec"]["template"]["spec"]["containers"][0]["env"] == [
            {"name": "KERAS_BACKEND", "value": "jax"}, by_gpus, {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "DATA", "value": "x"}, *entry]
        assert any("left out the run's KERAS_DISTRIBUTION_PROCESS_ID" in note for note in exported.notes)
    with pytest.raises(kwnb.KwnbError, match="a TFJob cannot run a --framework jax run: .* --to job"):
        export_run(run_dir, to="tfjob", image="img:1")


def test_the_doctor_imports_with_a_tasks_environment(monkeypatch):
    given = []

    def run(argv, **options):
        given.append(options["env"])
        raise OSError("not run")

    monkeypatch.setattr(doctor.subprocess, "run", run)
    session = {"PATH": "/usr/bin", "TF_CONFIG": "{}", "MPLBACKEND": "module://x", "TF_CPP_MIN_LOG_LEVEL": "0"}
    doctor.probe_python(sys.executable, session)
    assert [list(env.items()) for env in given] == [[
        ("PATH", "/usr/bin"), ("MPLBACKEND", "Agg"), ("TF_CPP_MIN_LOG_LEVEL", "2"),
        ("TF_USE_LEGACY_KERAS", "1"), ("PYTHONUNBUFFERED", "1"), ("CUDA_VISIBLE_DEVICES", "-1")]]


def test_the_doctors_jax_probe_runs_with_a_jax_tasks_environment(monkeypatch):
    from kwnb.machine import jax_check

    given = []

    def run(argv, **options):
        given.append(options["env"])
        raise OSError("not run")

    monkeypatch.setattr(jax_check.subprocess, "run", run)
    session = {"PATH": "/usr/bin", "TF_CONFIG": "{}", "KERAS_DISTRIBUTION_PROCESS_ID": "3"}
    assert jax_check.jax_check(sys.executable, session)[0] is False
    assert [list(env.items()) for env in given] == [[
        ("PATH", "/usr/bin"), ("KERAS_BACKEND", "jax"), ("JAX_PLATFORMS", "cpu"), ("PYTHONUNBUFFERED", "1"),
        ("MPLBACKEND", "Agg"), ("CUDA_VISIBLE_DEVICES", "-1")]]


# ----- the declaration ---------------------------------------------------------------------------------

def test_each_variable_is_declared_once_with_its_reason_and_its_setter():
    names = [variable.name for variable in task_env.EVERY_VARIABLE]
    assert len(names) == len(set(names)), names
    assert all(variable.why and variable.set_by for variable in task_env.EVERY_VARIABLE)
    # What the warm pool, Slurm and the exports leave out is read from the rows.
    jax_cluster = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                   "KERAS_DISTRIBUTION_PROCESS_ID", "JAX_COORDINATOR_BIND_ADDRESS")
    # (not TF_USE_LEGACY_KERAS: TensorFlow reads it at import, tests/test_warm.py's probe)
    assert set(task_env.NOT_KEYED) == {"TF_CONFIG", "KWNB_PARENT_PID", "KWNB_RUN_DIR", "KWNB_WORKER", *jax_cluster}
    assert set(task_env.PER_TASK) == {"TF_CONFIG", "KWNB_PARENT_PID", "KWNB_WORKER", "KERAS_DISTRIBUTION_PROCESS_ID"}
    assert task_env.CLUSTER_VARIABLES == ("TF_CONFIG", *jax_cluster)


def test_another_framework_brings_its_own_variables_in_tensorflows_place():
    cluster = task_env.Variable("KERAS_DISTRIBUTION_PROCESS_ID", task_env.Step.CLUSTER,
                                lambda facts, env: str(facts.config["task"]["index"]), "which process this is")
    other = task_env.Framework("other", (
        task_env.Variable("KERAS_BACKEND", task_env.Step.DEFAULT, lambda facts, env: "jax", "Keras on JAX",
                          in_pods=True), cluster))
    facts = task_env.TaskFacts(run_dir="/runs/r", position=1, config={"task": {"type": "worker", "index": 1}},
                               framework=other)
    env = task_env.task_environment(facts, {"DATA": "x"}, session={"PATH": "/bin"})
    assert list(env.items()) == [
        ("PATH", "/bin"), ("KERAS_BACKEND", "jax"), ("PYTHONUNBUFFERED", "1"), ("MPLBACKEND", "Agg"),
        ("CUDA_VISIBLE_DEVICES", "-1"), ("KWNB_PARENT_PID", str(os.getpid())), ("KWNB_RUN_DIR", "/runs/r"),
        ("KWNB_WORKER", "1"), ("KERAS_DISTRIBUTION_PROCESS_ID", "1"), ("DATA", "x")]
    assert task_env.pod_environment({"DATA": "x"}, other) == {"KERAS_BACKEND": "jax", "PYTHONUNBUFFERED": "1",
                                                              "DATA": "x"}


def test_tensorflows_joining_lines_survive_a_session_that_imported_jax(monkeypatch):
    # jax's __init__ does os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1"), and TensorFlow 2.21 imports jax where
    # it is installed: a kernel that read event files has it. Its tasks must still write TensorFlow's INFO lines.
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    assert task_env.task_environment(here=True)["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert task_env.task_environment(user={"TF_CPP_MIN_LOG_LEVEL": "2"})["TF_CPP_MIN_LOG_LEVEL"] == "2"
    jax_env = task_env.task_environment(task_env.TaskFacts(framework=task_env.JAX))
    assert jax_env["TF_CPP_MIN_LOG_LEVEL"] == "1"  # a JAX task's own: jax sets it there anyway
