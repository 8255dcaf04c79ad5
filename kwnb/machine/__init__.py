"""Facts about the machine a session runs on: its limits (cgroup v1/v2, JupyterHub's MEM_LIMIT and
CPU_LIMIT, the machine itself: limits.py), its free ports (ports.py), the GPUs it may use (gpus.py),
who else could connect to them (neighbours.py: a JupyterHub's other users, other accounts, a public
address), and how a size in bytes is shown, in binary units as those limits count (sizes.py).

Below backends/ and the engine, which both ask: imports only the standard library, psutil, portpicker
and kwnb.errors. A new fact about the machine (a device, a network capability) goes here.
"""
