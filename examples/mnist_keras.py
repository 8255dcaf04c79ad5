"""The tutorial's model.fit example, small enough for a laptop: run it with `kwnb run examples/mnist_keras.py -n 2`.

Every worker runs this same file; TF_CONFIG (set by kwnb) tells each which task it is.
"""
import numpy as np
import tensorflow as tf

from kwnb.datasets import mnist

PER_WORKER_BATCH = 64
EPOCHS = 3
STEPS_PER_EPOCH = 40

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch = PER_WORKER_BATCH * strategy.num_replicas_in_sync

(x_train, y_train), _ = mnist.load_data()
x_train = (x_train / np.float32(255))[..., None]
dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train.astype("int64")))
           .shuffle(8000, seed=0).repeat().batch(global_batch))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, verbose=2)
