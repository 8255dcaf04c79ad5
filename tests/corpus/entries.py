"""The corpus: each entry's program, how it is launched, the verdict kwnb must give and what happens by hand.

A verdict is the set of diagnosis kinds kwnb must give (none: a clean run, kwnb says nothing), and, where
given, words one of them must contain (the fix of a known error). `by_hand` is each task's exit code when the
program is started with plain subprocess.Popen and its own TF_CONFIG, or for Keras 3 on JAX the
KERAS_DISTRIBUTION_* variables set by hand (benchmarks/corpus.py; None: the task was still running, a ps or worker
that only serves, or one left waiting for a failed peer, and was killed once the chief ended or the failure's
grace ran out; -9: it was killed by SIGKILL). The learner mistakes are
tests/corpus/mistakes/; the askers' programs of questions and bug reports, rewritten small, tests/corpus/reports/
(each names its thread); the public programs are made from snapshots (snapshots.py), each edit said here. An
entry whose right verdict kwnb cannot give yet says what it `awaits`: its test is expected to fail until then.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .snapshots import SAMPLE, Snapshot, Source

MISTAKES = Path(__file__).parent / "mistakes"
REPORTS = Path(__file__).parent / "reports"
TF_DOCS = "tensorflow/docs"
TF_DOCS_COMMIT = "7c3650212740204359d4ceae481abc79345541be"
KUBEFLOW = "kubeflow/training-operator"
KUBEFLOW_TF2 = "ec176e3971a296a292edf1c2505a58010a6e0519"  # "Update tf job examples to tf v2 (#2270)"
KUBEFLOW_TF1 = "e1505acfa92e6be287ff2f6af41926bf61119902"  # its parent: the TensorFlow 1 examples
KERAS = "keras-team/keras"  # Keras 3: its guides are keras.io's (keras-io builds them from these files)
KERAS_COMMIT = "3422977a5e38fb2f7709aaa9a08e47f0c43d0f60"
APACHE = "Apache-2.0"
MNIST_SAMPLE = ("tf.keras.datasets.mnist.load_data()", SAMPLE)


def mnist_sample(train: int, test: int) -> str:
    """The first `train` and `test` digits of kwnb's sample, in load_data()'s structure (a few steps' worth)."""
    return (f"(lambda s: ((s[0][0][:{train}], s[0][1][:{train}]), (s[1][0][:{test}], s[1][1][:{test}])))"
            f"({SAMPLE})")


@dataclass(frozen=True)
class Entry:
    name: str
    main: str  # the script: a mistake's file, or a public program's file name
    kinds: tuple[str, ...] = ()  # the diagnoses kwnb must give; () = clean
    by_hand: tuple[int | None, ...] = (0, 0)  # exit codes in kwnb's task order (workers; chief first; ps last)
    says: str = ""  # words a diagnosis must contain
    any_order: bool = False  # by_hand's codes in any order: which task gets them is a race (a port both bind)
    race: bool = False  # whether a task fails at all is a race (two saves of one path): by_hand and kinds are the
    # worst case; a run where fewer tasks failed, and fewer of the kinds were given, holds too (`says` still must)
    may_add: tuple[str, ...] = ()  # kinds told besides `kinds` only sometimes (a consequence a task may live to report)
    framework: str = "tensorflow"  # kwnb's --framework: "jax" for Keras 3 on JAX across processes
    n: int = 2
    ps: int = 0
    chief: bool = False
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    source: Snapshot | None = None  # a public program's; None: a learner mistake or a report's program
    license: str = ""
    changes: str = ""  # what was edited to make a public program small and offline
    report: str = ""  # the question or bug report a program of tests/corpus/reports/ follows (its URL)
    awaits: str = ""  # the work kwnb's right verdict needs (an issue's item); until then its test fails, as expected

    @property
    def public(self) -> bool:
        return self.source is not None

    def write(self, folder: Path) -> Path:
        """The program's files in folder (a public one from its snapshot; a mistake stays where it is, and the
        folder is its working directory); returns the script."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.source is None:
            return (REPORTS if self.report else MISTAKES) / self.main
        self.source.write(folder)
        return folder / self.main


def docs(files: dict[str, Source]) -> Snapshot:
    return Snapshot(TF_DOCS, TF_DOCS_COMMIT, files)


MWK = "site/en/tutorials/distribute/multi_worker_with_keras.ipynb"
CTL = "site/en/tutorials/distribute/multi_worker_with_ctl.ipynb"
SMALL_FIT = ("epochs=3, steps_per_epoch=70", "epochs=2, steps_per_epoch=5")
MWK_SETUP = Source(MWK, (20,), (MNIST_SAMPLE,))

PUBLIC = (
    Entry("tfdocs-multi-worker-keras", "main.py", license=APACHE, source=docs({
        "mnist_setup.py": MWK_SETUP, "main.py": Source(MWK, (43,), (SMALL_FIT,))}),
        changes="MNIST from kwnb's sample; fit 2 epochs of 5 steps (was 3 of 70)"),
    Entry("tfdocs-multi-worker-keras-save", "main.py", license=APACHE, source=docs({
        "mnist_setup.py": MWK_SETUP,
        "main.py": Source(MWK, (43, 76, 79, 81, 85, 87), (SMALL_FIT, ("'/tmp/keras-model'", "'keras-model'"),
                                                       ("'/tmp/ckpt'", "'ckpt'")))}),
        changes="main.py, then the tutorial's save and checkpoint cells (write_filepath, every task saves, the "
                "others' temporary copies removed); MNIST from kwnb's sample; fit 2 x 5 steps; the paths in the "
                "run's folder instead of /tmp"),
    Entry("tfdocs-multi-worker-ctl", "main.py", license=APACHE, source=docs({
        "mnist.py": Source(CTL, (16,), (MNIST_SAMPLE,)),
        "main.py": Source(CTL, (52,), (("num_epochs = 3", "num_epochs = 2"),
                                       ("num_steps_per_epoch=70", "num_steps_per_epoch=5")))}),
        changes="MNIST from kwnb's sample; 2 epochs of 5 steps (was 3 of 70)"),
    # The model restored by load_model outside the strategy's scope trains its own copy on each task (its
    # second fit's epoch losses differ: 0.6502 and 0.6533): under MirroredStrategy the tutorial's way, under
    # MultiWorkerMirroredStrategy not distributed, and kwnb says so. Both tasks also save keras_save.keras, one
    # literal path (same_save_path).
    Entry("tfdocs-save-and-load-mwms", "main.py", ("not_distributed", "same_save_path"),
          says="outside strategy.scope()",
          license=APACHE, source=docs({"main.py": Source(
        "site/en/tutorials/distribute/save_and_load.ipynb", (6, 8, 10, 14, 16), (
            ("import tensorflow_datasets as tfds", "import numpy as np"),
            ("mirrored_strategy = tf.distribute.MirroredStrategy()",
             "mirrored_strategy = tf.distribute.MultiWorkerMirroredStrategy()"),
            ("  datasets = tfds.load(name='mnist', as_supervised=True)\n"
             "  mnist_train, mnist_test = datasets['train'], datasets['test']",
             f"  (x, y), (xt, yt) = {SAMPLE}\n"
             "  mnist_train = tf.data.Dataset.from_tensor_slices((x[:1024, :, :, None], y[:1024]))\n"
             "  mnist_test = tf.data.Dataset.from_tensor_slices((xt[:256, :, :, None], yt[:256]))"),
            ("'/tmp/keras_save.keras'", "'keras_save.keras'")))}),
        changes="MultiWorkerMirroredStrategy instead of MirroredStrategy; 1,024 MNIST digits of kwnb's sample "
                "instead of tensorflow_datasets' 60,000; the saved model in the run's folder; the cells up to the "
                "restored model's fit"),
    Entry("tfdocs-distributed-input", "main.py", license=APACHE, source=docs({"main.py": Source(
        "site/en/tutorials/distribute/input.ipynb", (7, 51), (
            ("strategy = tf.distribute.MirroredStrategy()", "strategy = tf.distribute.MultiWorkerMirroredStrategy()"),
        ))}), changes="MultiWorkerMirroredStrategy instead of MirroredStrategy (the preprocessing-layer section)"),
    Entry("tfdocs-guide-keras", "main.py", license=APACHE, source=docs({"main.py": Source(
        "site/en/guide/distributed_training.ipynb", (6, 36, 38, 40), (
            ("mirrored_strategy = tf.distribute.MirroredStrategy()",
             "mirrored_strategy = tf.distribute.MultiWorkerMirroredStrategy()"),))}),
        changes="the guide's MultiWorkerMirroredStrategy (its cell 16) in its Keras section instead of "
                "MirroredStrategy"),
    # Two true findings: the guide's cells set TF_CONFIG and delete it at once (a learner's run would train
    # alone), and its Estimator is gone from TensorFlow 2.16 (the run fails on it first).
    Entry("tfdocs-migrate-estimator", "main.py", ("error", "not_distributed"), (1, 1),
          says="TensorFlow 2.16 removed tf.estimator",
          license=APACHE, source=docs({"main.py": Source(
              "site/en/guide/migrate/multi_worker_cpu_gpu_training.ipynb", (6, 7, 9, 11, 14))}),
          changes="none: the guide's TensorFlow 1 cells (its TF_CONFIG set and deleted, then the Estimator)"),
    Entry("kubeflow-dist-mnist", "dist_mnist.py", n=1, chief=True, ps=1, by_hand=(0, None, None),
          args=("--epochs", "2"), license=APACHE,
          source=Snapshot(KUBEFLOW, KUBEFLOW_TF2, {
              "dist_mnist.py": Source("examples/tensorflow/dist-mnist/dist_mnist.py", edits=(
                  ("steps_per_epoch=6000 // args.batch_size * 2", "steps_per_epoch=5"),
                  ("eval_steps_per_epoch = 10000 // args.batch_size * 2", "eval_steps_per_epoch = 4"))),
              "mnist_utils.py": Source("examples/tensorflow/mnist_utils.py", edits=(
                  ("mnist.load_data(path=data_path) if data_path else mnist.load_data()", SAMPLE),))}),
          changes="MNIST from kwnb's sample; 2 epochs of 5 steps, 4 evaluation steps"),
    Entry("kubeflow-dist-mnist-tf1", "dist_mnist.py", ("error",), (1, 1), says="TensorFlow 1",
          license=APACHE, source=Snapshot(KUBEFLOW, KUBEFLOW_TF1, {
              "dist_mnist.py": Source("examples/tensorflow/dist-mnist/dist_mnist.py")}), changes="none"),
    Entry("kubeflow-mnist-with-summaries", "mnist_with_summaries.py", ("not_distributed",),
          args=("--epochs", "2", "--log_dir", "logs"), license=APACHE,
          source=Snapshot(KUBEFLOW, KUBEFLOW_TF2, {
              "mnist_with_summaries.py": Source("examples/tensorflow/mnist_with_summaries/mnist_with_summaries.py"),
              "mnist_utils.py": Source("examples/tensorflow/mnist_utils.py", edits=(
                  ("mnist.load_data(path=data_path) if data_path else mnist.load_data()",
                   f"(lambda s: ((s[0][0][:640], s[0][1][:640]), (s[1][0][:320], s[1][1][:320])))({SAMPLE})"),))}),
          changes="640 training and 320 test digits of kwnb's sample; 2 epochs; TensorBoard logs in the run's "
                  "folder. No strategy: a one-process program, run on 2 workers as a learner would"),
    Entry("kubeflow-keras-to-estimator", "keras_model_to_estimator.py", ("error",), (1, 1), says="TensorFlow 1",
          args=("model_dir",), license=APACHE, source=Snapshot(KUBEFLOW, KUBEFLOW_TF1, {
              "keras_model_to_estimator.py": Source(
                  "examples/tensorflow/distribution_strategy/estimator-API/keras_model_to_estimator.py")}),
          changes="none"),
    Entry("kubeflow-multi-worker-keras", "multi_worker_strategy-with-keras.py", license=APACHE,
          args=("--saved_model_dir", "saved", "--checkpoint_dir", "ckpt"), source=Snapshot(KUBEFLOW, KUBEFLOW_TF2, {
              "multi_worker_strategy-with-keras.py": Source(
                  "examples/tensorflow/distribution_strategy/multi_worker_strategy-with-keras.py", edits=(
                      ("import tensorflow_datasets as tfds", "import numpy as np"),
                      ('    datasets, _ = tfds.load(name="mnist", with_info=True, as_supervised=True)\n\n'
                       '    return datasets["train"]',
                       f"    (x, y), _ = {SAMPLE}\n"
                       "    return tf.data.Dataset.from_tensor_slices((x[:2048, :, :, None], y[:2048]))"),
                      ("epochs=10, steps_per_epoch=70", "epochs=2, steps_per_epoch=5"),
                      ("    tfds.disable_progress_bar()\n", "")))}),
          changes="2,048 MNIST digits of kwnb's sample instead of tensorflow_datasets'; 2 epochs of 5 steps "
                  "(was 10 of 70)"),
)


def keras(files: dict[str, Source]) -> Snapshot:
    return Snapshot(KERAS, KERAS_COMMIT, files)


GUIDE = "guides/distributed_training_with_tensorflow.py"
FIRST_SECTION = '"""\n## Using callbacks to ensure fault tolerance'
GUIDE_DATA = (("keras.datasets.mnist.load_data()", mnist_sample(2048, 512)),
              ("num_val_samples = 10000", "num_val_samples = 512"))
GUIDE_DATA_SAID = "2,048 training and 512 test digits of kwnb's sample (512 of them for validation, was 10,000)"

# Keras 3 programs on the TensorFlow backend (`import keras`): its progress bar is read as tf-keras' is.
KERAS_ENTRIES = (
    # MirroredStrategy reads no TF_CONFIG: on two workers each trains alone, as the guide's single machine would.
    Entry("keras-guide-multi-gpu-tf", "main.py", ("not_distributed",), license=APACHE, source=keras({
        "main.py": Source(GUIDE, until=FIRST_SECTION, edits=GUIDE_DATA)}),
        changes=f"the guide's first section (fit 2 epochs and evaluate); {GUIDE_DATA_SAID}"),
    # Under a load average of 38 kwnb also said `killed`: its own stacks signal (every live task silent) reached
    # worker 0 while it exited after the error, its handler gone (exit -12); a fault of kwnb's, not of the verdict.
    Entry("keras-guide-multi-gpu-tf-mwms", "main.py", ("keras3",), (1, 1), license=APACHE, source=keras({
        "main.py": Source(GUIDE, until=FIRST_SECTION, edits=GUIDE_DATA + (
            ('strategy = tf.distribute.MirroredStrategy()\nprint("Number of devices',
             'strategy = tf.distribute.MultiWorkerMirroredStrategy()\nprint("Number of devices'),))}),
        changes=f"the guide's first section with MultiWorkerMirroredStrategy instead of MirroredStrategy, as a "
                f"learner going multi-worker would; {GUIDE_DATA_SAID}"),
    # Its fault-tolerance section: every task (each alone) writes ./ckpt/ckpt-1.keras, the same file, twice, and
    # restores the newest file there between the two fits: a task that lists it while another writes it fails
    # (`error`, "may have been another task's file"), in one run of many (the suite's tasks one at a time).
    Entry("keras-guide-multi-gpu-tf-checkpoints", "main.py", ("not_distributed",), may_add=("error",),
          says="same path", license=APACHE,
          source=keras({"main.py": Source(GUIDE, edits=GUIDE_DATA)}), changes=f"none but the data: {GUIDE_DATA_SAID}"),
    Entry("keras-demo-mnist-convnet", "main.py", ("not_distributed",), license=APACHE, source=keras({
        "main.py": Source("examples/demo_mnist_convnet.py", edits=(
            ("keras.datasets.mnist.load_data()", mnist_sample(1024, 256)), ("epochs = 3", "epochs = 2")))}),
        changes="1,024 training and 256 test digits of kwnb's sample; 2 epochs (was 3). No strategy: a "
                "one-process program, run on 2 workers as a learner would"),
    Entry("keras-guide-custom-train-step-tf", "main.py", ("not_distributed",), license=APACHE, source=keras({
        "main.py": Source("guides/custom_train_step_in_tensorflow.py", until='"""\n## Going lower-level',
                          edits=(("x = np.random.random((1000, 32))", "x = np.random.random((320, 32))"),
                                 ("y = np.random.random((1000, 1))", "y = np.random.random((320, 1))")))}),
        changes="the guide's first section (a train_step of its own, fit 3 epochs); 320 random examples (was "
                "1,000). No strategy: run on 2 workers as a learner would"),
)

TF_ISSUE = "https://github.com/tensorflow/tensorflow/issues/"

# Programs of questions and bug reports, rewritten small (tests/corpus/reports/, each file names its thread).
REPORT_ENTRIES = (
    # Which worker's save fails, if any, is a race, as the threads say: MergeV2Checkpoints' "variables_temp/
    # part-00000-of-00001 did not exist" (seen on worker 0 under kwnb, worker 1 by hand), h5py's "unable to lock
    # file" (seen by hand; under kwnb both saves passed that time).
    Entry("report-save-same-path", "save_same_path.py", ("same_save_path",), (0, 1), any_order=True, race=True,
          report=TF_ISSUE + "38635", says="same path"),
    Entry("report-h5-same-path", "h5_same_path.py", ("same_save_path",), (0, 1), any_order=True, race=True,
          report="https://github.com/ray-project/ray/issues/27938", says="same path"),
    Entry("report-checkpoint-same-path", "checkpoint_same_path.py", report=TF_ISSUE + "31070"),
    Entry("report-mirrored-on-workers", "mirrored_on_workers.py", ("not_distributed",), report=TF_ISSUE + "59091"),
    # Both workers fail on their own; kwnb quoted "ValueError: in user code:" and said worker 1 lost worker 0.
    Entry("report-loss-reduction", "loss_reduction.py", ("error",), (1, 1), report=TF_ISSUE + "27857",
          says="reduction=tf.keras.losses.Reduction.NONE"),
    # Worker 0 gets 3 batches, worker 1 2 (11 sharded by hand, then again by the strategy); both fail by hand. Under
    # kwnb the survivor is told as the root cause's consequence (peer_lost, linked to uneven_steps), not a crash,
    # where it reported the lost peer before the failure policy stopped it (a race: seen both ways).
    Entry("report-shard-after-batch", "shard_after_batch.py", ("uneven_steps",), (1, 1), may_add=("peer_lost",),
          report="https://github.com/horovod/horovod/issues/2083", says="by hand after batching"),
)

MISTAKE_ENTRIES = (
    Entry("clean-fit", "clean_fit.py"),
    Entry("fixed-tf-config", "fixed_tf_config.py", ("tf_config_overridden",), (None, 1), any_order=True),
    Entry("tf-config-deleted", "tf_config_deleted.py", ("not_distributed",), says="deletes TF_CONFIG"),
    Entry("tf-config-popped", "tf_config_popped.py", ("not_distributed",), says="quiet_setup.py"),
    Entry("tf-config-cleared", "tf_config_cleared.py", ("not_distributed",), says="TF_CONFIG"),
    Entry("outside-scope", "outside_scope.py", ("not_distributed",), says="outside strategy.scope()"),
    Entry("no-repeat", "no_repeat.py", ("input_exhausted",)),
    Entry("chief-only-save", "chief_only_save.py", ("uneven_steps",), (1, 0)),
    Entry("import-keras", "import_keras.py", ("keras3",), (1, 1)),
    Entry("legacy-keras-off", "legacy_keras_off.py", ("keras3",), (1, 1), says="TF_USE_LEGACY_KERAS",
          env={"TF_USE_LEGACY_KERAS": "0"}),
    Entry("runaway-learning-rate", "runaway_learning_rate.py", ("diverging",)),
    Entry("nan-loss", "nan_loss.py", ("nan_loss",)),
    Entry("strategy-after-op", "strategy_after_op.py", ("error",), (1, 1), says="create MultiWorkerMirroredStrategy first"),
    Entry("estimator", "estimator.py", ("error",), (1, 1), says="TensorFlow 2.16 removed tf.estimator"),
    Entry("uneven-steps", "uneven_steps.py", ("uneven_steps",), (1, 0)),
)

JAX = "jax"

# Keras 3 on JAX across processes (kwnb's --framework jax): NumPy data, no TensorFlow, 2 epochs of 8 steps.
JAX_MISTAKES = (
    Entry("jax-clean-fit", "jax_clean_fit.py", framework=JAX),
    Entry("jax-no-initialize", "jax_no_initialize.py", ("jax_alone",), framework=JAX,
          says="never called keras.distribution.initialize()"),
    # Process 1's ValueError is told with its traceback (`error`); jax_not_joined is for an end without one.
    # By hand process 0 waits in initialize() (300 s by JAX's default), killed once the failure's grace ran out.
    Entry("jax-shard-before-join", "jax_shard_before_join.py", ("error",), (None, 1), framework=JAX,
          says="cannot reshape array"),
    Entry("jax-initialize-late", "jax_initialize_late.py", ("error",), (1, 1), framework=JAX,
          says="Call keras.distribution.initialize() first"),
    Entry("jax-numpy-auto-shard", "jax_numpy_auto_shard.py", ("error",), (1, 1), framework=JAX,
          says="Give fit a tf.data.Dataset"),
    # Process 1's SIGKILL is `killed` (from outside kwnb), process 0's failed all-reduce its consequence. By hand
    # JAX aborts process 0 (SIGABRT) about 80 s later: it is killed before that, once the failure's grace ran out.
    Entry("jax-process-killed", "jax_process_killed.py", ("killed", "jax_peer_lost"), (None, -9), framework=JAX,
          says="lost its peer worker 1, which was killed by SIGKILL"),
)

ENTRIES = PUBLIC + KERAS_ENTRIES + REPORT_ENTRIES + MISTAKE_ENTRIES + JAX_MISTAKES
