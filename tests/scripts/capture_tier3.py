"""The third tier's captures for tests/data/tf-2.21/ (issue 29): capture_tf_logs.py's scenarios plus training
that ran but was wrong, errors TensorFlow words without the fix, and a job whose tasks only serve.

    .venv/bin/python tests/scripts/capture_tier3.py --only not-distributed,outside-scope,diverging,\
collective-ops-late,no-estimator,serving-roles > tests/data/tf-2.21/capture-report-tier3.json

Same options and conditions as capture_tf_logs.py (its Cluster, its data_fit.py), kept apart because that
file is long already. The scripts below are data_fit.py with one mistake each, line for line otherwise.
"""
from __future__ import annotations

import sys
from pathlib import Path

import capture_tf_logs as capture
from capture_tf_logs import DATA_FIT, Cluster, all_exited, data_fit

STRATEGY = "strategy = tf.distribute.MultiWorkerMirroredStrategy()"
# data_fit.py deleting TF_CONFIG before it creates its strategy: each task trains alone.
UNSET_FIT = DATA_FIT.replace(STRATEGY, 'del os.environ["TF_CONFIG"]  # the mistake\n' + STRATEGY)
# data_fit.py building its model outside strategy.scope(): each task trains its own copy.
NOSCOPE_FIT = DATA_FIT.replace("with strategy.scope():\n", "if True:  # the mistake: not strategy.scope()\n")
# data_fit.py with a TensorFlow op (its dataset) before the strategy.
LATE_FIT = DATA_FIT.replace(STRATEGY + "\n", "").replace("with strategy.scope():", STRATEGY + "\nwith strategy.scope():")
# data_fit.py configured the TensorFlow 1 way (an old tutorial's RunConfig).
ESTIMATOR_FIT = DATA_FIT.replace(STRATEGY, STRATEGY + "\nconfig = tf.estimator.RunConfig(train_distribute=strategy)")
PS_CHIEF = (Path(__file__).parent / "ps_chief_fit.py").read_text()  # Kubeflow's dist_mnist pattern, tiny
ROLES = (("chief", 0), ("worker", 0), ("ps", 0))


class RolesCluster(Cluster):
    """A chief, a worker and a ps, each its own TF_CONFIG; logs named by role (serving-roles-ps-0.log)."""

    def tf_config(self, index: int) -> dict:
        cluster = {kind: [self.addresses[i]] for i, (kind, _) in enumerate(ROLES)}
        return {"cluster": cluster, "task": {"type": ROLES[index][0], "index": 0}}

    def log(self, index: int) -> Path:
        return self.out / f"{self.name}-{ROLES[index][0]}-0.log"


def serving_roles(c: Cluster) -> dict:
    """The chief trains (ParameterServerStrategy's coordinator); the worker and the ps serve until killed."""
    roles = RolesCluster(c.name, c.out, c.workdir, [*c.ports, capture.portpicker.pick_unused_port()])
    try:
        for index in range(3):
            roles.start(index, "ps_chief_fit.py")
        marks = [(0, "chief done"), (1, "serving"), (2, "serving")]
        ok = roles.wait(lambda r: 0 in r.exits, 240, marks)
        roles.wait(lambda r: False, 3, marks)
        return {"chief finished": ok, "serving roles alive at the chief's end": [i not in roles.exits for i in (1, 2)],
                **roles.exit_report(roles.t0)}
    finally:
        roles.kill_all()
        c.procs.update(roles.procs)  # else run() takes serving-roles-worker-0.log for a worker never started


def main() -> None:
    capture.SCRIPTS.update({"unset_fit.py": UNSET_FIT, "noscope_fit.py": NOSCOPE_FIT, "late_fit.py": LATE_FIT,
                            "estimator_fit.py": ESTIMATOR_FIT, "ps_chief_fit.py": PS_CHIEF})
    capture.SCENARIOS.update({
        "not-distributed": data_fit([], ["Started server", "connected"], script="unset_fit.py"),
        "outside-scope": data_fit([], ["loss:"], script="noscope_fit.py"),
        "diverging": data_fit(["--lr", "1000", "--epochs", "4", "--steps", "10"], ["loss:"]),
        "collective-ops-late": data_fit([], ["Collective ops must be configured"], script="late_fit.py"),
        "no-estimator": data_fit([], ["has no attribute 'estimator'"], script="estimator_fit.py"),
        "serving-roles": serving_roles,
    })
    capture.main()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
