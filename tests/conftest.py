"""tests/: warm starts are off unless a test asks for them (warm=True), so that no test's CPU is
shared with a pool importing TensorFlow in the background after another test's run."""
import os

os.environ.setdefault("KWNB_WARM", "0")
