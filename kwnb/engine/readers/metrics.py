"""Training curves read from what workers print, so training code needs no change.

Understands Keras progress bars (`model.fit`, verbose 1 and 2, as tf-keras and Keras 3 write them to files:
`\\r`/`\\b`-redrawn step lines, one `\\n`-terminated line per epoch; Keras 3's colours are gone by the time
the pieces get here, readers/lines.py), the custom-loop tutorial's `Epoch: 0, accuracy: 0.83, train_loss: 0.52.`
lines, and rows written by `kwnb.report()`. Epochs are numbered from 0, as in Keras's `History.epoch`.

A bar drawn after a fit's epoch ended and before the next `Epoch k/N` is not training's: `evaluate` (its last
line's values are kept in `evaluations`) or `predict` (no values). Keras prints `Epoch k/N` before every epoch
(Keras 3 only when fitting more than one), so those bars neither move the step count nor replace an epoch. A
custom loop's own count lines, or a Progbar it draws with no `Epoch k/N`, are read as before (`_fit_ended`).
"""
from __future__ import annotations

import json
import math
import re

from .lines import LineSplitter
from .tf_messages import RUNTIME_PREFIX

_TOKENS = re.compile(
    r"""
      (?:^|(?<=\r))Epoch\ (?P<epoch>\d+)/(?P<epochs>\d+)[ \t]*$           # Keras: "Epoch 2/5"
    | (?:^|(?<=\r))Epoch:?\ *(?P<cepoch>\d+)[ \t]*[,:][ \t]*(?P<cmetrics>[^\r\n]*?)[ \t]*$   # custom loop line
    | (?P<step>\d+)/(?P<steps>\d+|Unknown)\ (?P<rest>[^\r\n\x08]*)(?P<end>[\r\n\x08])  # progress
    """,
    re.MULTILINE | re.VERBOSE,
)
_METRIC = re.compile(
    r"(?:^|[\s,])(?P<key>[A-Za-z_][\w./]*)\s*[:=]\s*(?P<value>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))(?![\w])",
    re.IGNORECASE,
)
_NOT_METRICS = {"eta"}
MAX_STEP_ROWS = 20_000  # per worker; thinned beyond that so memory stays flat on long runs


def parse_metrics(text: str) -> dict[str, float]:
    """`loss: 0.52 - accuracy: 0.83` or `accuracy: 0.83, train_loss: 0.52.` as a dict of floats."""
    found = {}
    for match in _METRIC.finditer(text):
        key = match["key"]
        if key.lower() not in _NOT_METRICS:
            found[key] = float(match["value"])
    return found


def unsummed_note(parsers: list["MetricsParser"]) -> str:
    """A run's note when some task's per-step values were left as printed because no epoch's end told kwnb
    whether they were summed over replicas (curves never halve values on a guess). Told either way, there
    was no guess: no note (a run whose epochs showed them unsummed, as kwnb.report or a plain loop print)."""
    unsure = [p for p in parsers if p.steps and p.step_scale != 1.0 and p.replicas_summed is None]
    if not unsure:
        return ""
    replicas = round(1.0 / unsure[0].step_scale)
    return (f"per-step curves are drawn as printed: no epoch's end showed them summed over the {replicas} replicas "
            f"(tf-keras sums them under MultiWorkerMirroredStrategy, and kwnb then divides by {replicas}), so kwnb "
            f"did not divide them")


class MetricsParser:
    """Epoch and step rows of one worker, fed its output in arbitrary chunks."""

    def __init__(self, step_scale: float = 1.0):
        # tf-keras reduces per-step logs with "sum" off TPU, so under MultiWorkerMirroredStrategy
        # its running step values are N times the epoch's; the Run passes 1/N to undo that. Only once an
        # epoch's end shows the sum happened (a model built outside strategy.scope(), or a task training
        # alone, prints step values already on the epoch's scale): until then they are kept as printed.
        self.step_scale = step_scale
        self.replicas_summed: bool | None = None if step_scale != 1.0 else False  # None: not yet told
        self._unscaled: list[dict] = []  # step rows kept as printed while replicas_summed is None
        self._last_drawn: dict | None = None  # the epoch's last redrawn step values, as printed
        self.epochs: dict[int, dict] = {}
        self.steps: list[dict] = []
        self.epoch: int | None = None  # the epoch in progress (0-based)
        self.total_epochs: int | None = None
        self.step: int | None = None  # step within the epoch, as printed (1-based)
        self.steps_per_epoch: int | None = None
        self._lines = LineSplitter()  # only for text fed in arbitrary pieces (feed): a task's reader splits its own
        self._report_lines = LineSplitter()
        self._reported: dict[int, dict] = {}  # explicit kwnb.report() epoch values, which always win
        self._step_stride = 1
        self._seen_steps = 0
        self.nonfinite: dict | None = None  # the first row with a NaN or infinite value, as parsed
        self.evaluations: list[dict] = []  # `model.evaluate`'s results, as printed, with the epoch they followed
        self._evaluating = False  # an epoch ended and no `Epoch k/N` began another: bars are evaluate's or predict's

    def feed(self, text: str) -> None:
        """Output in arbitrary pieces (a test, a whole log read in chunks): split as a task's reader splits it."""
        self.take(self._lines.split(text))

    def take(self, text: str) -> None:
        """Whole pieces of output, each ended by `\n` or `\r` (readers/lines.py), as a task's reader hands them."""
        if text:
            self._scan(text)

    def _scan(self, text: str) -> None:
        # Every line the patterns match holds "Epoch" or a "12/100" count: dropping the others first
        # cut the parser's cost on chatty workers from 0.44 s to 0.008 s of CPU per 100k plain lines.
        if "/" not in text and "Epoch" not in text:
            return
        lines = text.split("\n")
        last = lines.pop()  # after the last "\n": frames of a line still being drawn, each ended by \r
        text = "".join(line + "\n" for line in lines if "/" in line or "Epoch" in line)
        if "/" in last or "Epoch" in last:
            text += last
        for match in _TOKENS.finditer(text):
            if match["epoch"] is not None:
                self.epoch, self.total_epochs = int(match["epoch"]) - 1, int(match["epochs"])
                self._last_drawn, self._evaluating = None, False
                self.step = 0
            elif match["cepoch"] is not None:
                metrics = parse_metrics(match["cmetrics"])
                if metrics:
                    self.epoch = int(match["cepoch"])
                    self._add_epoch(self.epoch, metrics)
            else:
                self._progress(match)

    def _progress(self, match: re.Match) -> None:
        """A progress bar's line: a step as it is drawn, or an epoch when the line ends with its values."""
        rest, end = match["rest"], match["end"]
        # TensorFlow's C++ logging can write into a bar still being drawn (its line has no "\n" yet):
        # "...loss: 0.6931W0000 00:00:1795533745.29 12375 preemption_notifier.cc:90] ..." read as an epoch
        # with a metric "preemption_notifier.cc" of 90 and a loss of 0. The bar's part only, and no epoch's end.
        glued = RUNTIME_PREFIX.search(rest) if "] " in rest else None
        if glued:
            rest, end = rest[:glued.start()], "\r"
        elif end == "\n" and _counting_down(match):
            end = "\r"  # a bar still counting down, cut by the script's own line: a step, not the epoch's end
        metrics = parse_metrics(rest)
        if not metrics:
            return  # "Waiting for 1/2 tasks", predict's bar and the like
        if self._evaluating:
            if end == "\n":
                self.evaluations.append({"epoch": self.epoch if self.epoch is not None else 0, **metrics})
            return
        if self.epoch is None and "━" in rest:
            self.epoch = 0  # Keras 3 prints no `Epoch 1/1` when fitting one epoch: its bar is epoch 1's all the same
        step = int(match["step"])
        self.step = step
        if match["steps"] != "Unknown":
            self.steps_per_epoch = int(match["steps"])
        epoch = self.epoch if self.epoch is not None else 0
        if end == "\n":
            self._learn_summed(metrics)
            if self.steps and self.steps[-1]["epoch"] == epoch and self.steps_per_epoch:
                # Keras redraws at most every 0.05 s, so the last step drawn is often not the
                # last step; the epoch line is (with values already reduced: no scaling).
                self._add_step(epoch, step, metrics, always=True)
            self._add_epoch(epoch, metrics)
            self._evaluating = self._fit_ended(match)
        else:
            self._last_drawn = metrics
            scale = self.step_scale if self.replicas_summed else 1.0
            row = self._add_step(epoch, step, {k: v * scale for k, v in metrics.items()})
            if row is not None and self.replicas_summed is None:
                self._unscaled.append(row)

    def _fit_ended(self, match: re.Match) -> bool:
        """Whether an epoch's line is a Keras fit's (so a bar that follows with no `Epoch k/N` is evaluate's): at its
        last step, after an `Epoch k/N`, or drawn as Keras 3 draws it (`━━━`: a fit of one epoch has no header).
        A loop's own lines are not (`step 1/40 - loss: 0.69`, or a tf-keras Progbar's per epoch with no header):
        each is read as before, the next replacing it."""
        steps = match["steps"]
        keras = self.total_epochs is not None or "━" in match["rest"]
        return keras and steps.isdigit() and int(match["step"]) == int(steps)

    def _learn_summed(self, epoch_values: dict) -> None:
        """At an epoch's end: were its step values summed over replicas? The last redrawn value against the
        epoch's: about N times it when summed, about equal when not (the geometric mean, sqrt(N), between)."""
        drawn, self._last_drawn = self._last_drawn, None
        # An accuracy first: a running mean of values in [0, 1] moves little between the last redrawn step and
        # the epoch's end, where a diverging loss can grow 1000x in one step.
        names = [k for k in epoch_values if "acc" in k] + ["loss"] + list(epoch_values)
        name = next((k for k in names if k in epoch_values and k in (drawn or {}) and epoch_values[k] > 0), None)
        if self.replicas_summed is not None or name is None:
            return
        ratio = drawn[name] / epoch_values[name]
        if not math.isfinite(ratio):
            return
        self.replicas_summed = ratio > (1.0 / self.step_scale) ** 0.5
        if self.replicas_summed:
            for row in self._unscaled:
                row.update({k: v * self.step_scale for k, v in row.items() if k not in ("epoch", "step")})
        self._unscaled = []

    def _check_finite(self, row: dict) -> None:
        """Remember the first NaN or inf (a few isfinite calls per row: cheap enough for every row)."""
        if self.nonfinite is None and not all(map(math.isfinite, row.values())):
            self.nonfinite = row

    def _add_epoch(self, epoch: int, metrics: dict) -> None:
        self._check_finite({"epoch": epoch, **metrics})
        # A restarted worker (BackupAndRestore) prints an epoch again: the latest value wins,
        # except over values stated with kwnb.report(), whichever file was read first.
        self.epochs[epoch] = {"epoch": epoch, **metrics, **self._reported.get(epoch, {})}

    def _add_step(self, epoch: int, step: int, metrics: dict, always: bool = False) -> dict | None:
        """The row added, or None when thinning skips it."""
        self._check_finite({"epoch": epoch, "step": step, **metrics})
        self._seen_steps += 1
        if self._seen_steps % self._step_stride and not always:
            return None
        global_step = epoch * self.steps_per_epoch + step if self.steps_per_epoch else self._seen_steps
        row = {"epoch": epoch, "step": global_step, **metrics}
        self.steps.append(row)
        if len(self.steps) > MAX_STEP_ROWS:
            self.steps = self.steps[::2]
            self._step_stride *= 2
        return row

    def add_reported(self, row: dict) -> None:
        """A row from `kwnb.report()`: explicit, so it wins over what was parsed."""
        metrics = {k: float(v) for k, v in row.items() if k not in ("epoch", "step", "time") and _is_number(v)}
        self._check_finite({**{k: row[k] for k in ("epoch", "step") if row.get(k) is not None}, **metrics})
        if row.get("epoch") is not None and row.get("step") is None:
            epoch = int(row["epoch"])
            self._reported[epoch] = {**self._reported.get(epoch, {}), **metrics}
            self.epochs[epoch] = {**self.epochs.get(epoch, {}), "epoch": epoch, **self._reported[epoch]}
        elif row.get("step") is not None:
            epoch = row["epoch"] if row.get("epoch") is not None else (self.epoch if self.epoch is not None else 0)
            self.steps.append({"epoch": int(epoch), "step": int(row["step"]), **metrics})

    def feed_rows(self, epochs=(), steps=(), steps_per_epoch: int | None = None) -> None:
        """Rows read elsewhere (TensorBoard event files): explicit, so merged as kwnb.report() rows are.

        `steps_per_epoch` places step rows on the epoch axis where no progress bar told it."""
        for row in [*epochs, *steps]:
            self.add_reported(row)
        if steps_per_epoch and not self.steps_per_epoch:
            self.steps_per_epoch = steps_per_epoch
        while len(self.steps) > MAX_STEP_ROWS:  # thinned as parsed steps are, so memory stays flat
            self.steps = self.steps[::2]

    def feed_report_lines(self, text: str) -> None:
        """kwnb.report()'s rows as its file grows: a half-written row waits for its end (readers/lines.py)."""
        for line in self._report_lines.split(text).splitlines():
            if line.strip():
                try:
                    self.add_reported(json.loads(line))
                except (ValueError, TypeError):
                    continue  # not a row kwnb.report() wrote

    def history(self) -> list[dict]:
        return [self.epochs[e] for e in sorted(self.epochs)]

    def progress(self) -> tuple[float | None, str]:
        """Fraction done and a label like `epoch 2/5, step 30/100`, where the output tells."""
        if self.epoch is None:
            return None, ""
        label = f"epoch {self.epoch + 1}" + (f"/{self.total_epochs}" if self.total_epochs else "")
        if self.step and self.steps_per_epoch:
            label += f", step {self.step}/{self.steps_per_epoch}"
        if not self.total_epochs:
            return None, label
        within = (self.step or 0) / self.steps_per_epoch if self.steps_per_epoch else 0.0
        done = self.epoch + 1 if self.epoch in self.epochs else self.epoch + within
        return min(1.0, done / self.total_epochs), label


def _counting_down(match: re.Match) -> bool:
    """A bar line that shows an epoch still under way: tf-keras' `ETA: 3s`, which its epoch's last line never shows
    (it draws the last step with an ETA too before it finalizes with the time per step: a callback's print between
    the two cut `5/5 ... - ETA: 0s - loss: 4.46` off as a line of its own); Keras 3's bar (`━`, its ETA bare) before
    the last step; or a count of unknown steps. An epoch's last line always shows the last step: Keras finalizes at
    the target, or at the count reached where it did not know it (`12/Unknown` ends as `12/12`)."""
    rest, steps = match["rest"], match["steps"]
    if steps == "Unknown" or "ETA:" in rest:
        return True
    return "━" in rest and int(match["step"]) < int(steps)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
