"""Records one task of a real run for tests/replay.py: `python record_task.py OUT.jsonl ARGV...` starts ARGV (the
task as kwnb would start it), passes its output through to this process's stdout (the task's log) and appends each
chunk to OUT.jsonl as it comes, with its time since the start, so that a task kwnb kills leaves what it printed;
at the end, the exit code. A TF_CONFIG record the task writes into the run folder is kept too, with its time.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

KWNB_TASK = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "kwnb", "task")
sys.path.insert(0, os.path.dirname(os.path.dirname(KWNB_TASK)))
from kwnb.task.runfolder import PARENT_PID_ENV, POSITION_ENV, RUN_DIR_ENV, RunFolder  # noqa: E402  (standard library only)


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    start = time.monotonic()
    env = dict(os.environ, **{PARENT_PID_ENV: str(os.getpid())})  # the task's watchdog follows this process
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    record = RunFolder(os.environ[RUN_DIR_ENV]).tf_config_set(os.environ[POSITION_ENV])
    with open(out, "a", encoding="utf-8") as lines:
        def note(**fields):
            lines.write(json.dumps({"t": round(time.monotonic() - start, 3), **fields}) + "\n")
            lines.flush()
        seen_record = False
        while True:
            ready, _, _ = select.select([child.stdout], [], [], 0.05)
            chunk = os.read(child.stdout.fileno(), 65536) if ready else b""
            if chunk:
                os.write(1, chunk)
                note(out=chunk.decode("utf-8", "surrogateescape"))
            if not seen_record and os.path.exists(record):
                seen_record = True
                with open(record, encoding="utf-8") as handle:
                    fields = json.load(handle)
                fields["time"] = round(fields["time"] - (time.time() - (time.monotonic() - start)), 3)  # since start
                note(tf_config_set=fields)
            if ready and not chunk:
                break
        code = child.wait()
        note(exit=code)
    if code < 0:
        os.kill(os.getpid(), -code)  # ended by a signal: so is this process, as kwnb saw the task
    sys.exit(code)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main()
