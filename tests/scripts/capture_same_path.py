"""Captures tests/replay.py's same-path scenarios: every worker saving to one path fails at random, so each is run
again until one of its tasks fails (at most TRIES times), and what each try gave is printed:

    PYTHONPATH=. .venv/bin/python tests/scripts/capture_same_path.py same-path-savedmodel
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from replay import capture_scenario  # noqa: E402

TRIES = 8


def main(names):
    for name in names:
        for attempt in range(1, TRIES + 1):
            run = capture_scenario(name, Path(tempfile.mkdtemp(prefix=f"kwnb-capture-{name}-")))
            print(name, attempt, run.exit_codes, sorted((d.kind, d.task) for d in run.diagnosis_history), flush=True)
            if any(code for code in run.exit_codes):
                break


if __name__ == "__main__":
    main(sys.argv[1:])
