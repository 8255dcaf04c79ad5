"""A learner's set-up module that 'cleans the environment' on import (for tf_config_popped.py)."""
import os

os.environ.pop("TF_CONFIG", None)  # "start from a clean slate", as the tutorial's first cells do
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
