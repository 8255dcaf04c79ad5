"""Facts about the machine a session runs on: its limits (cgroup v1/v2, JupyterHub's MEM_LIMIT and
CPU_LIMIT, the machine itself: limits.py), its free ports (ports.py), the GPUs it may use (gpus.py),
who else could connect to them (neighbours.py: a JupyterHub's other users, other accounts, a public
address), and how a size in bytes is shown, in binary units as those limits count (sizes.py).

Also every task's environment (task_env.py), built from those facts: each variable a task gets, declared
once, with each task's GPUs and its private temporary folder (task_temp.py).

Below backends/, export/ and the engine, which all ask: imports only the standard library, psutil,
portpicker, kwnb.errors and kwnb.task's names. A new fact about the machine (a device, a network
capability) goes here; so does a new environment variable for tasks (a row in task_env.py).
"""
