"""One task of a run: its process and its state (task.py), the frozen view of it that the policy, the
diagnoses and the snapshot share (view.py), what the overview shows of it (vitals.py), the statuses
and phases (status.py) and the roles a task can have (roles.py: chief, evaluator,
coordinator).

May import readers/ (what a task's output says), backends' base (the process) and kwnb/task/. A new
role, or a new fact kept about each task, goes here.
"""
