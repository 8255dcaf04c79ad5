"""After tensorflow/tensorflow#59091 ("Mirrored strategy keras model.fit failure"): the asker's reproduction,
MirroredStrategy with a one-unit model on a constant dataset (rewritten), here started on two workers as a learner
would: MirroredStrategy reads no TF_CONFIG, so each worker trains alone."""
import tensorflow as tf

print("TensorFlow version:", tf.__version__)
mirrored_strategy = tf.distribute.MirroredStrategy()
with mirrored_strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((1,)), tf.keras.layers.Dense(1)])
model.compile(loss="mse", optimizer="sgd")
dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
model.fit(dataset, epochs=2)
print("Does it work?")
model.evaluate(dataset)
