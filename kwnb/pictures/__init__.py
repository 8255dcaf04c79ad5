"""The run's pictures, drawn with matplotlib from a RunSnapshot: the curves (plotting.py), the
timeline of each task's phases (timeline.py), and the PNGs a run's folder keeps at the end
(outputs.py), drawn in a subprocess so that the caller never imports matplotlib: a kernel's painter
(painter.py) draws its dashboards' live curves, %kw_plot's figures and, where it runs, the end's pictures.

Above the engine (they read snapshots), below the notebook and the terminal, which show them.
"""
