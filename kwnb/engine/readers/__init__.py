"""Reading what a task writes, pure and at the bottom of the engine: following a growing file
(follow.py), where a piece of it ends (lines.py), rendering its bytes as a terminal shows them (screen.py),
the one reader of each task's output that splits it once and hands its lines, classified, to their sinks
(output.py), TensorFlow's own messages (tf_events.py, tf_messages.py), Keras' and kwnb.report()'s metric rows (metrics.py), a sidecar
evaluator's rows (evaluation.py) and TensorBoard's event files (tensorboard.py).

Readers take bytes or lines and return values; they know no Task, no Run, no process. They import
only the standard library, TensorBoard's reader, kwnb.errors and each other. A new kind of line to
recognise is one module here.
"""
