"""kwnb export of a `--framework jax` run (Keras 3 on JAX across processes): `--to job` writes objects Kubernetes'
schemas accept, each pod's entry point gives it what kwnb's engine gives that task (its KERAS_DISTRIBUTION_* made
in the pod from JOB_COMPLETION_INDEX, no TF_CONFIG), and two such pods, each a process in a network namespace of
its own with the DNS names Kubernetes gives it, train together; `--to tfjob` refuses in one line.
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest

from kwnb.engine.live import registry
from kwnb.engine.live.run import Run
from kwnb.export import export_run, job
from kwnb.machine import task_env
from kwnb.task import jax_task, k8s_entry
from k8s_job_checks import by_kind, check_manifest, engine_environment, lay_out_pod, problems, run_pod
import slurm_netns

CORPUS = Path(__file__).parent / "corpus" / "mistakes"
SHOW_ENV = "import json, os\nprint(json.dumps(dict(os.environ)))\n"


def jax_run(folder: Path, script: str, files: dict[str, str] | None = None) -> Path:
    """A 2-worker `--framework jax` run's folder (nothing starts)."""
    (folder / "main.py").write_text(script)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return Run("main.py", 2, files=list(files or {}), framework="jax", cwd=folder, runs_dir=folder / "runs",
               env={"DATA_DIR": "/data"}).dir


@pytest.fixture
def in_tmp_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a run's files are found, as in a notebook's folder
    monkeypatch.setattr(registry, "_RUNS", [])  # a run named main another test of this process launched is not it


@pytest.mark.parametrize("gpus_per_pod", [0, 1])
def test_each_pod_gets_what_the_engine_gives_that_jax_task(tmp_path, in_tmp_folder, gpus_per_pod):
    run_dir = jax_run(tmp_path, SHOW_ENV)
    exported = export_run(run_dir, to="job", image="registry.example/keras-jax:3", gpus_per_pod=gpus_per_pod)
    objects = check_manifest(exported.yaml, run_dir)  # the schemas of 1.26 and 1.37, and what they cannot say
    assert "jax" in exported.header and "keras" in exported.header and "TensorFlow only if the script imports it" in \
        exported.header
    repo_task = Path(k8s_entry.__file__).parent
    assert objects["ConfigMap"]["data"]["kwnb.jax_task.py"] == (repo_task / "jax_task.py").read_text()
    description = json.loads((run_dir / "run.json").read_text())
    framework = task_env.framework_named(description["framework"])
    # The framework's own rows, those every pod gets and the run's --env: as the engine makes them for that task.
    compared = {v.name for v in framework.variables} | {v.name for v in task_env.COMMON if v.in_pods} | \
        set(description["env"])
    for index in range(2):
        result = run_pod(objects, index, tmp_path / f"pod-{index}")  # the entry point without kwnb (python -S)
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        engine = engine_environment(objects, description, index, gpus=gpus_per_pod > 0)
        # The one difference: in a pod the coordinator listens on every interface of the pod's own network.
        assert engine[jax_task.BIND_ENV] == "main-0.main:2222"
        assert seen[jax_task.BIND_ENV] == f"{k8s_entry.EVERY_INTERFACE}:2222"
        assert {name: seen.get(name) for name in compared - {jax_task.BIND_ENV}} == \
            {name: engine.get(name) for name in compared - {jax_task.BIND_ENV}}
        assert seen[jax_task.PROCESS_ID_ENV] == str(index) and seen[jax_task.JOB_ADDRESSES_ENV] == "main-0.main:2222"
        assert ("JAX_PLATFORMS" in seen) == (gpus_per_pod == 0)  # the engine's rows decided it, as under --gpus
        assert "TF_CONFIG" not in seen and "TF_USE_LEGACY_KERAS" not in seen
        assert f"kwnb: this pod is worker {index} of 2 at main-{index}.main, " in result.stderr


def test_the_tfjob_refuses_a_jax_run_in_one_line_naming_the_job(tmp_path, in_tmp_folder):
    run_dir = jax_run(tmp_path, SHOW_ENV)
    with pytest.raises(ValueError, match="a TFJob cannot run a --framework jax run") as error:
        export_run(run_dir, to="tfjob", image="img:1")
    assert "--to job" in str(error.value) and "\n" not in str(error.value)


def test_a_jax_pod_says_which_variables_it_cannot_build(tmp_path, in_tmp_folder):
    run_dir = jax_run(tmp_path, SHOW_ENV)
    objects = check_manifest(export_run(run_dir, to="job", image="img:1").yaml, run_dir)
    result = run_pod(objects, 0, tmp_path / "pod", JOB_COMPLETION_INDEX="2")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == "kwnb: cannot build keras.distribution's variables: JOB_COMPLETION_INDEX=2, but the " \
                            "job has 2 tasks\n"


def test_no_files_ships_the_jax_entry_point_too(tmp_path, in_tmp_folder):
    run_dir = jax_run(tmp_path, SHOW_ENV)
    exported = export_run(run_dir, to="job", image="img:1", files=False)
    objects = check_manifest(exported.yaml, run_dir)
    assert sorted(objects["ConfigMap"]["data"]) == sorted({**job.ENTRY_FILES, **job.JAX_ENTRY_FILES})
    assert any("jax_task.py" in note and "KERAS_DISTRIBUTION_*" in note for note in exported.notes)


def test_the_checks_refuse_a_manifest_that_sets_a_pods_own_variable(tmp_path, in_tmp_folder):
    run_dir = jax_run(tmp_path, SHOW_ENV)
    objects = export_run(run_dir, to="job", image="img:1").objects
    description = json.loads((run_dir / "run.json").read_text())
    assert problems(objects, description) == []
    [container] = by_kind(objects)["Job"]["spec"]["template"]["spec"]["containers"]
    container["env"].append({"name": jax_task.PROCESS_ID_ENV, "value": "0"})  # every pod would be process 0
    assert f"{jax_task.PROCESS_ID_ENV} is set in the manifest: the entry point must build it per pod" in \
        problems(objects, description)


# ----- two pods, each in a network namespace of its own, train together -----------------------------------
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras") is None,
                               reason="needs jax and keras (the test extra)")
# What enters a pod's own mount and UTS namespaces: the hosts file and the hostname the kubelet gives a pod.
ENTER_POD = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'


def pod_hosts(objects: dict, addresses: list[str], index: int) -> str:
    """Pod `index`'s /etc/hosts as the kubelet writes it (its own FQDN and hostname), plus the records the cluster DNS
    gives for the headless Service (`<job>-i.<service>`, each pod's address), which no DNS server serves here."""
    name, service = objects["Job"]["metadata"]["name"], objects["Service"]["metadata"]["name"]
    own = f"{addresses[index]}\t{name}-{index}.{service}.default.svc.cluster.local\t{name}-{index}\n"
    return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + own + "".join(
        f"{address}\t{name}-{i}.{service}\n" for i, address in enumerate(addresses))


def start_pod(objects: dict, index: int, root: Path, network: slurm_netns.Network, host: str,
              addresses: list[str]) -> tuple[subprocess.Popen, Path]:
    """Pod `index` as a process in `host`'s network namespace, in a mount and UTS namespace of its own with the
    pod's /etc/hosts and hostname; its output (stdout and stderr) in a file."""
    argv, workdir, env = lay_out_pod(objects, index, root)
    hosts = root / "etc-hosts"
    hosts.write_text(pod_hosts(objects, addresses, index))
    hostname = f"{objects['Job']['metadata']['name']}-{index}"
    env.update(HOME=str(root), HOSTNAME=hostname)  # the container runtime's and Kubernetes' own
    # The image's Python has jax and keras. The entry point runs without site (-S: lay_out_pod), so that it cannot
    # import kwnb, and a JAX run's script runs in its process: its packages come from PYTHONPATH, which does not
    # run the .pth hook of kwnb's editable install.
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    output = root / "output.log"
    with open(output, "w") as log:
        process = subprocess.Popen([*network.enter(host), shutil.which("unshare"), "--mount", "--uts", "sh", "-c",
                                    ENTER_POD, "pod", str(hosts), hostname, *argv],
                                   cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, output


def epoch_losses(output: str) -> list[str]:
    """The loss of each epoch as Keras' verbose=2 line prints it ("8/8 - 1s - ... - loss: 0.6931")."""
    return re.findall(r"^\d+/\d+ - .*\bloss: ([0-9.]+)", output, re.MULTILINE)


def run_pods(tmp_path, script: str) -> tuple[list[int | None], list[str], list[float]]:
    """The exported job of `script` (beside it corpus' tiny.py) as two pods, each in a network namespace of its own:
    their exit codes, outputs and seconds from their start to their end (None and the deadline for one still
    running at 240 s, which is then killed)."""
    try:
        slurm_netns.check()
        missing = [tool for tool in ("unshare", "mount", "hostname") if not shutil.which(tool)]
        if missing:
            raise slurm_netns.NetworkUnavailable(f"{', '.join(missing)} not found (Debian: util-linux, hostname)")
        network = slurm_netns.create(2)  # two hosts, each a network namespace with its own address on a bridge
    except slurm_netns.NetworkUnavailable as why:
        pytest.skip(f"no network namespaces here: {why}")
    processes = []
    try:
        run_dir = jax_run(tmp_path, script, {"tiny.py": (CORPUS / "tiny.py").read_text()})
        objects = check_manifest(export_run(run_dir, to="job", image="img:1").yaml, run_dir)
        addresses = [network.address(host) for host in network.nodes]
        started = time.monotonic()
        processes = [start_pod(objects, index, tmp_path / f"pod-{index}", network, host, addresses)
                     for index, host in enumerate(network.nodes)]
        deadline = started + 240  # within pytest's 300 s
        codes, took = [None, None], [240.0, 240.0]
        while None in codes and (now := time.monotonic()) < deadline:
            for index, (process, _) in enumerate(processes):  # pods seen ended in one look: one time, not two
                if codes[index] is None and process.poll() is not None:
                    codes[index], took[index] = process.returncode, now - started
            time.sleep(0.2)
        outputs = [output.read_text() for _, output in processes]
    finally:
        for process, _ in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        network.remove()
    return codes, outputs, took


@needs_jax
@pytest.mark.slow
def test_two_pods_in_their_own_networks_train_together(tmp_path, in_tmp_folder):
    codes, outputs, _ = run_pods(tmp_path, (CORPUS / "jax_clean_fit.py").read_text())  # 16 s here
    assert codes == [0, 0], outputs
    assert "the coordinator, listening on [::]:2222" in outputs[0] and "coordinator main-0.main:2222" in outputs[1]
    for output in outputs:
        assert "[Gloo] Rank" in output, output  # JAX's join: each process connected to its peer
    losses = [epoch_losses(output) for output in outputs]
    assert len(losses[0]) == 2 and losses[0] == losses[1], outputs  # one model, all-reduced: the same losses


@needs_jax
@pytest.mark.slow
def test_a_pod_whose_script_raises_ends_at_once_with_the_scripts_traceback(tmp_path, in_tmp_folder):
    """JAX alone holds a process that raised at its shutdown barrier for up to 300 s; the pod's entry point runs the
    script with kwnb's hook (task/jax_task.py), so the pod ends as soon as the traceback is printed."""
    script = (CORPUS / "jax_clean_fit.py").read_text().replace(
        "x, y = ", "if process_id == 1:\n    raise ValueError('bad shard')\nx, y = ", 1)
    codes, outputs, took = run_pods(tmp_path, script)
    print(f"the pods ended after {took[0]:.1f} s and {took[1]:.1f} s, exit codes {codes}")
    assert codes[1] == 1, outputs[1]
    assert "[Gloo] Rank" in outputs[1], outputs[1]  # it raised after joining, where JAX would hold it
    traceback = outputs[1][outputs[1].index("Traceback (most recent call last):"):]
    assert re.fullmatch(r'  File ".*/main\.py", line \d+, in <module>', traceback.splitlines()[1]) and \
        traceback.rstrip().endswith("ValueError: bad shard"), traceback  # from the script's own frame on
    # Pod 1 ends no later than pod 0, to the loop's 0.2 s (both may end within one look), and soon (JAX alone: 300 s
    # more)
    assert took[1] <= took[0] and took[1] < 120, (took, outputs)
    assert codes[0] not in (None, 0), (codes, outputs[0][-3000:])  # its peer gone: pod 0 cannot finish
