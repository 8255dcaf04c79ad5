"""The live run: Run (run.py), how it is launched (settings.py: LaunchSettings), the supervisor thread
that watches its tasks through the run's declared side (supervisor.py), what a user does to a task
(control.py), the failure policy (policy.py), planning the cluster (cluster.py), checking a launch's
inputs (inputs.py), the process's runs by name (registry.py) and kwnb's own log (log.py). Each
task's environment and GPUs are built below, in machine/task_env.py.

The top of the engine: may import every other engine package, backends/ and machine/. A new policy
decision, or a new thing a run does while it goes, goes here.
"""
