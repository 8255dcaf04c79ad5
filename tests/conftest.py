"""tests/: warm starts are off unless a test asks for them (warm=True), so that no test's CPU is
shared with a pool importing TensorFlow in the background after another test's run; and the one
teardown that modules starting runs share."""
import os

import pytest

os.environ.setdefault("KWNB_WARM", "0")


@pytest.fixture
def stop_leftover_runs():
    """After the test, stop every run it left going (a failed assertion before its own stop): its
    workers would otherwise train on into the next test's CPU and time."""
    yield
    import kwnb

    for run in kwnb.runs():
        if not run.done:
            run.stop(reason="test teardown")
