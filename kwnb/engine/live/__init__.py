"""The live run: the learner's Run (run.py), which holds the engine's side (run_engine.py: RunEngine, whose
fields say which lock guards them) and the supervisor thread that works on it (supervisor.py); the names Run
showed before (compat.py), what an on_end callback does after the end (after_end.py), how a run is launched
(settings.py: LaunchSettings, every launch option declared once), what a user does to a task (control.py),
what a ParameterServerStrategy coordinator needs (coordinator.py), the failure policy (policy.py), planning
the cluster (cluster.py), checking a launch's inputs (inputs.py), the process's runs by name (registry.py)
and kwnb's own log (log.py). Each task's environment and GPUs are built below, in machine/task_env.py.

The top of the engine: may import every other engine package, backends/ and machine/. A new policy
decision, or a new thing a run does while it goes, goes here.
"""
