"""Learner mistakes whose errors TensorFlow words without the fix (issue 29). argv: which one.

    late_strategy  a TensorFlow op before MultiWorkerMirroredStrategy is created
    estimator      tf.estimator, removed in TensorFlow 2.16
    session        TensorFlow 1 graph code (tf.compat.v1.placeholder) under the strategy
"""
import sys

import tensorflow as tf

mistake = sys.argv[1]
if mistake == "late_strategy":
    x = tf.constant([1.0, 2.0])  # the first op configures TensorFlow's context: too late for collectives
strategy = tf.distribute.MultiWorkerMirroredStrategy()
if mistake == "estimator":
    config = tf.estimator.RunConfig(train_distribute=strategy)
if mistake == "session":
    with strategy.scope():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
print("DONE", flush=True)
