"""One task of a replayed run (tests/replay.py): `python replay_task.py RECORDING.jsonl` writes the recorded
output to stdout (the task's log) at the recorded times (seconds since its start), writes the TF_CONFIG record the real task
wrote into the run folder, then exits with the recorded code: a signal's by that signal, so that kwnb sees what it
saw of the real task. A recording without an exit (the task was still running when kwnb stopped it) stays silent
until it is signalled, as a stalled task does.
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from kwnb.task.runfolder import POSITION_ENV, RUN_DIR_ENV, RunFolder  # noqa: E402  (standard library only)


def main() -> None:
    recording = sys.argv[1]
    start = time.monotonic()
    wall = time.time()
    with open(recording, encoding="utf-8") as handle:
        events = [json.loads(line) for line in handle]
    for event in events:
        delay = start + event["t"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if "out" in event:
            os.write(1, event["out"].encode("utf-8", "surrogateescape"))
        elif "tf_config_set" in event:
            fields = dict(event["tf_config_set"], time=wall + event["tf_config_set"]["time"])
            with open(RunFolder(os.environ[RUN_DIR_ENV]).tf_config_set(os.environ[POSITION_ENV]), "w") as record:
                json.dump(fields, record)
        elif "exit" in event:
            if event["exit"] < 0:
                os.kill(os.getpid(), -event["exit"])
            sys.exit(event["exit"])
    while True:  # never ended by itself: kwnb ends it
        signal.pause()


if __name__ == "__main__":
    main()
