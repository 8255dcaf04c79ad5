"""Worker for tests/test_run.py: plain Python (no TensorFlow) that states its metrics with kwnb.report().

Values come from a RNG seeded by the task index; the same rows are written to argv[1]/expected-<index>.json
so the test compares what kwnb read with what the worker reported, not with constants.
"""
import json
import os
import random
import sys
from pathlib import Path

import kwnb

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
rng = random.Random(index)
epochs, steps = [], []
for epoch in range(3):
    for step in range(4):
        row = {"epoch": epoch, "step": epoch * 4 + step + 1, "loss": rng.random()}
        kwnb.report(**row)
        steps.append(row)
    row = {"epoch": epoch, "loss": rng.random(), "accuracy": rng.random()}
    kwnb.report(**row)
    epochs.append(row)
Path(sys.argv[1], f"expected-{index}.json").write_text(json.dumps({"epochs": epochs, "steps": steps}))
print(f"reporter {index} done")
