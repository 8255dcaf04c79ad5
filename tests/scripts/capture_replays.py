"""Captures the runs the suite replays (tests/replay.py's SCENARIOS) with real TensorFlow, into tests/data/replays/:

    PYTHONPATH=. .venv/bin/python tests/scripts/capture_replays.py [NAME ...]   # all by default; 3 at a time

Each run is a real 2-worker run through kwnb (the local backend, host network, no warm pool); what kwnb made of it
is printed, to compare with what the replay makes of it.
"""
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from replay import SCENARIOS, capture_scenario  # noqa: E402

AT_ONCE = 3  # 6 TensorFlow tasks on 2 cores: more at once and the joins time out under load


def main(names):
    for start in range(0, len(names), AT_ONCE):
        group, said = names[start:start + AT_ONCE], {}

        def one(name):
            run = capture_scenario(name, Path(tempfile.mkdtemp(prefix=f"kwnb-capture-{name}-")))
            said[name] = (run.exit_codes, sorted((d.kind, d.task) for d in run.diagnosis_history))
        threads = [threading.Thread(target=one, args=(name,)) for name in group]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name in group:
            print(name, *said.get(name, ("failed",)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(SCENARIOS))
