"""Mistake, Keras 3 on JAX: one process dies mid-fit (here process 1 at its fourth step, by SIGKILL, as the
kernel's OOM killer ends a process whose machine has less memory than its peer's). Process 0's next all-reduce
fails (Gloo: connection closed by peer) and JAX aborts it only after about 80 s of missed heartbeats."""
import os
import signal

import keras

keras.distribution.initialize()

import jax

import tiny


class DiesAt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if jax.process_index() == 1 and batch == 3:
            os.kill(os.getpid(), signal.SIGKILL)


keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
processes, process_id = jax.process_count(), jax.process_index()
x, y = (tiny.part(a, process_id, processes) for a in tiny.arrays(seed=0))
model = tiny.model(keras, seed=0)
model.fit(x, y, batch_size=32 // processes, epochs=2, shuffle=False, verbose=2, callbacks=[DiesAt()])
