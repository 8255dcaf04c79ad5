"""What is kept of a run and read back: the immutable snapshot every view renders (snapshot.py), the
text summary (summary.py), what the run folder records at the end (record.py), past runs reopened
from their folders (past.py), reading a run's tasks, rows and logs (reading.py, shared by a live and
a past run) and the older names kept working (compat.py).

May import diagnoses/, tasks/ and readers/; never live/: a reader of a run takes a snapshot. A new
view of a finished run goes here; a new field run.json keeps is a field tagged `kept` where it is declared.
"""
