"""No learner's cell shows TensorFlow's start-up lines. The beginners' notebook's kernel never imports TensorFlow
(only the workers do, and their logs keep those lines); the Keras lessons import it in the kernel after
`%load_ext kwnb`, which sends those lines to the kernel's log (kwnb/notebook/kernel_stderr.py).

ipykernel forwards what the kernel process writes to its file descriptor 2, so TensorFlow's C++ start-up
lines (absl's warning, cudart, cpu_feature_guard, oneDNN) show in the cell that imports it, in red, twice;
except under pytest: it skips that when PYTEST_CURRENT_TEST is set, so the kernels here start without it, as
a learner's does. The last test checks that the lines do show then, so that the first one can fail.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook, new_output

from kwnb.engine.readers.tf_messages import is_runtime_line

HELLO = Path(__file__).resolve().parents[1] / "notebooks" / "00_hello_cluster.ipynb"
KERNEL_TIMEOUT = 300  # s per cell: a 2-worker run on 2 cores other tests load took up to 101 s to join


def tensorflow_startup_lines(notebook) -> list[str]:
    """The lines of TensorFlow's runtime that executed cells show on stderr."""
    return [line for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if output.get("name") == "stderr"
            for line in output.text.splitlines() if is_runtime_line(line)]


def executed(notebook, folder: Path):
    """The notebook run in `folder` by a kernel that shows its stderr as JupyterLab's kernels do."""
    learners_env = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}
    NotebookClient(notebook, timeout=KERNEL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute(env=learners_env)
    return notebook


def test_startup_lines_are_told_from_other_stderr():
    cell = new_code_cell("import tensorflow", outputs=[new_output("stream", name="stderr", text=(
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1795461390.258002    2841 cudart_stub.cc:31] Could not find cuda drivers on your machine\n"
        "a warning of the learner's own\n")), new_output("stream", name="stdout", text="I0000 00:00:1.0 1 a.cc:1] x\n")])
    assert len(tensorflow_startup_lines(new_notebook(cells=[cell]))) == 2


@pytest.mark.slow
def test_hello_cluster_cells_show_no_tensorflow_startup_lines(tmp_path):
    shutil.copy(HELLO, tmp_path)  # its scripts and run folders go there, not into notebooks/
    notebook = executed(nbformat.read(tmp_path / HELLO.name, as_version=4), tmp_path)
    assert tensorflow_startup_lines(notebook) == []
    assert kwnb_ran_the_workers(notebook)


def kwnb_ran_the_workers(notebook) -> bool:
    """The hello run printed its sums (TensorFlow did start, in the workers)."""
    return any("got the sum 3.0" in output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []))


@pytest.mark.slow
def test_a_kernel_that_imports_tensorflow_shows_its_startup_lines(tmp_path):
    notebook = executed(new_notebook(cells=[new_code_cell("import tensorflow")]), tmp_path)
    assert tensorflow_startup_lines(notebook)


@pytest.mark.slow
def test_a_kernel_that_loads_kwnb_first_keeps_tensorflows_lines_out_and_its_own(tmp_path):
    """Notebooks 01-05 train a baseline in the kernel: with kwnb loaded first, the import's start-up lines go to
    the kernel's log (kernel_stderr.py), and a line of the learner's own on descriptor 2 still shows."""
    notebook = executed(new_notebook(cells=[
        new_code_cell("%load_ext kwnb"), new_code_cell("import tensorflow"),
        new_code_cell("import os, time\nos.write(2, b'a line of my own\\n')\ntime.sleep(0.5)")]), tmp_path)
    assert tensorflow_startup_lines(notebook) == []
    shown = [output.text for output in notebook.cells[2].get("outputs", []) if output.get("name") == "stderr"]
    assert "a line of my own" in "".join(shown)


@pytest.mark.slow
def test_the_keras_lessons_set_up_cell_shows_no_tensorflow_startup_lines(tmp_path):
    """01's set-up cell (02 to 05 and the solutions open the same way) imports TensorFlow in the kernel."""
    lesson = nbformat.read(HELLO.with_name("01_multi_worker_keras.ipynb"), as_version=4)
    set_up = next(cell for cell in lesson.cells if "%load_ext kwnb" in cell.source)
    notebook = executed(new_notebook(cells=[new_code_cell(set_up.source)]), tmp_path)
    assert tensorflow_startup_lines(notebook) == []
    assert "tf.keras is tf_keras" in "".join(output.get("text", "") for output in notebook.cells[0].outputs)


def stderr_lines(cell) -> list[str]:
    return [line for output in cell.get("outputs", []) if output.get("name") == "stderr"
            for line in output.text.splitlines()]


@pytest.mark.slow
def test_kwnbs_note_that_mnist_is_the_offline_sample_is_not_red(tmp_path, monkeypatch):
    """Notebook 01 executed headless showed one red line: kwnb's note that MNIST cannot download and its offline
    sample is used. A note is not an error: it is the cell's plain output (stdout), and nothing of kwnb's own is
    on stderr. Its set-up cell, its helper module and the baseline that loads the data, offline."""
    monkeypatch.setenv("KWNB_OFFLINE", "1")  # the sample whatever ~/.keras holds: the note is then always said
    lesson = nbformat.read(HELLO.with_name("01_multi_worker_keras.ipynb"), as_version=4)
    wanted = ("%load_ext kwnb", "%%kw_file mnist_setup.py", "single_worker_dataset =")
    cells = [new_code_cell(next(cell.source for cell in lesson.cells if mark in cell.source)) for mark in wanted]
    notebook = executed(new_notebook(cells=cells), tmp_path)
    shown = "".join(output.get("text", "") for output in notebook.cells[2].outputs if output.get("name") == "stdout")
    assert "kwnb: MNIST download unavailable (KWNB_OFFLINE=1); using the 10,000-digit offline sample" in shown
    assert [line for cell in notebook.cells for line in stderr_lines(cell) if "kwnb" in line] == []
