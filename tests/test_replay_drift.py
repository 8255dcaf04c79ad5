"""The replays' captures still say what TensorFlow prints: four scenarios run afresh with real TensorFlow
(tests/replay.py's run_afresh, 2-worker runs at once, each task forked from its run's one import, as a learner's
are), and the three known errors raised in one process, compared with the captures the replayed tests read
(tests/data/replays/). It fails when TensorFlow changes the words kwnb reads (then capture again:
tests/scripts/capture_replays.py) or when what kwnb makes of a real run differs from what it makes of its replay.

Together with the replayed tests (test_diagnose.py, test_training_faults.py, test_finished_but_wrong.py) this is
the claim those tests made on real runs: real TensorFlow prints X (here), and kwnb says Y of X (there).
"""
from __future__ import annotations

import re
import threading

import pytest

from replay import REPLAYS, captured_text, run_afresh

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOINED = (r"grpc_server_lib\.cc:\d+\] Started server with target: grpc://localhost:@@PORT\d@@",
          r"Coordination agent has successfully connected\.")
# What each scenario's tasks print that kwnb's readers and diagnoses key on, as TensorFlow (and tf-keras) word it.
SAID = {
    "raise": {"worker-0": JOINED + (r"UNAVAILABLE: .*(Socket closed|Connection reset by peer|stopped sending heartbeats|"
                                    r"failed to connect to all addresses)",
                                    r"tensorflow\.python\.framework\.errors_impl\.UnavailableError"),
              "worker-1": JOINED + (r'File "@@SCRIPTS@@/diagnose_fit\.py", line \d+, in on_batch_end',
                                    r"ValueError: bad batch on worker 1", r"Epoch 1/2")},
    "paths": {"worker-0": JOINED + (r"Shape mismatch in the collective instance \d+\. Op at device "
                                    r"/job:worker/replica:0/task:\d/device:CPU:0 expected shape \[\d*\] but another "
                                    r"member in the group expected shape \[\d+\]",
                                    r"tensorflow\.python\.framework\.errors_impl\.InvalidArgumentError",
                                    r'File "@@SCRIPTS@@/diagnose_fit\.py", line \d+, in chief_only_summary'),
              "worker-1": JOINED + (r"Collective ops is aborted by: .*Shape mismatch in the collective instance",
                                    r"tensorflow\.python\.framework\.errors_impl\.InvalidArgumentError")},
    "data": {task: JOINED + (r"WARNING:tensorflow:Your input ran out of data; interrupting training\. Make sure that "
                             r"your dataset or generator can generate at least `steps_per_epoch \* epochs` batches "
                             r"\(in this case, 20 batches\)\. You may need to use the repeat\(\) function",
                             r"\d+/10 - \d+s - loss: nan - accuracy: [\d.]+", r"Epoch 1/2")
             for task in ("worker-0", "worker-1")},
    "keras3": {task: (r"Attempt to convert a value \(PerReplica:\{",
                      r"with an unsupported type \(<class 'tensorflow\.python\.distribute\.values\.PerReplica'>\) "
                      r"to a Tensor\.") for task in ("worker-0", "worker-1")},
}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The scenarios run with TensorFlow now, at once: what each task printed (with a capture's placeholders), and
    the runs."""
    texts, runs = {}, {}
    folders = {name: tmp_path_factory.mktemp(name) for name in SAID}  # here: mktemp is not safe from threads

    def one(name):
        runs[name], texts[name] = run_afresh(name, folders[name])
    threads = [threading.Thread(target=one, args=(name,)) for name in SAID]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return texts, runs


@pytest.mark.parametrize("name", list(SAID))
def test_tensorflow_still_prints_what_the_captures_hold(fresh, name):
    texts, _ = fresh
    for task, patterns in SAID[name].items():
        stored, now = captured_text(name, task, REPLAYS), texts[name][task]
        for pattern in patterns:
            assert re.search(pattern, stored), f"the stored capture {name}/{task} lacks {pattern!r}"
            assert re.search(pattern, now), f"TensorFlow no longer prints {pattern!r} ({name}, {task}):\n{now[-3000:]}"


def root_causes(run) -> list:
    """The run's findings but consequences (`follows`: a peer's loss that a task may or may not live to report
    before kwnb stops it, which load decides) and a join a loaded machine made late."""
    return [d for d in run.diagnoses if not d.follows and d.kind != "waiting_for_peers"]


def kinds(run, with_tasks=True):
    return sorted((d.kind, d.task if with_tasks else None) for d in root_causes(run))


def test_kwnb_makes_of_a_replay_what_it_made_of_the_real_run(fresh, replayed):
    _, real = fresh
    for name in SAID:
        # data: which task is told first of the data running out, or of the NaN, is whichever kwnb read first
        with_tasks = name != "data"
        assert kinds(replayed[name], with_tasks) == kinds(real[name], with_tasks), (real[name].summary(),
                                                                                    replayed[name].summary())
        assert replayed[name].exit_codes == real[name].exit_codes or name == "raise", name  # raise: kwnb stops the chief
        def plain(message: str) -> str:  # for data, the same words whichever task they name
            return message if with_tasks else re.sub(r"worker \d+", "worker N", message)
        first_words = [plain(d.message).split(" (")[0][:60] for d in root_causes(replayed[name])]
        said = " ".join(plain(d.message) for d in real[name].diagnoses)
        assert all(words in said for words in first_words), (first_words, said)


def test_tensorflow_still_words_the_known_errors_as_captured():
    """test_diagnose.py's three known errors (late_strategy, estimator, session) are replayed; TensorFlow's words for
    them, raised afresh in one process, are still the captures' (whose fix kwnb adds, known_errors.py)."""
    import subprocess
    import sys

    from replay import SCRIPTS

    said = subprocess.run([sys.executable, str(SCRIPTS / "known_error_words.py")], capture_output=True, text=True,
                          timeout=600)
    words = dict(line.split("\t", 1) for line in said.stdout.splitlines() if "\t" in line)
    assert set(words) == {"late_strategy", "estimator", "session"}, said.stdout + said.stderr[-3000:]
    for name, error in words.items():
        for task in ("worker-0", "worker-1"):
            assert error in captured_text(name, task), (name, task, error)
