"""Worker for tests/test_run.py: a custom training loop under MultiWorkerMirroredStrategy.

Prints `Epoch: %d, accuracy: %f, train_loss: %f.` once per epoch, as TensorFlow's
multi-worker custom training loop tutorial does; kwnb must read its curves from these lines.
The step itself is loop_step.py's.
"""
import tensorflow as tf
from loop_step import training

EPOCHS, STEPS, GLOBAL_BATCH = 3, 4, 32

strategy = tf.distribute.MultiWorkerMirroredStrategy()
train_step, train_accuracy = training(strategy, GLOBAL_BATCH)

for epoch in range(EPOCHS):
    total_loss = 0.0
    for _ in range(STEPS):
        total_loss += train_step()
    print("Epoch: %d, accuracy: %f, train_loss: %f." % (epoch, train_accuracy.result(), total_loss / STEPS), flush=True)
    train_accuracy.reset_states()
