"""Mistake: an old tutorial's tf.estimator (removed in TensorFlow 2.16)."""
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
config = tf.estimator.RunConfig(train_distribute=strategy)
