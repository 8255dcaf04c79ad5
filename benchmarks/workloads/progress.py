"""A light task for section 7's many-task rounds (no TensorFlow): Keras-like progress for SECONDS.

    progress.py SECONDS [RATE]   RATE progress redraws a second (default 10), `\\r`-drawn as tf-keras
                                 does into a file, an epoch line every 20 steps
"""
import sys
import time

seconds = float(sys.argv[1])
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
epochs, steps = max(1, int(seconds * rate / 20)), 20
start = time.time()
print(f"Epoch 1/{epochs}", flush=True)
for i in range(epochs * steps):  # about SECONDS
    epoch, step = divmod(i, steps)
    time.sleep(max(0.0, start + (i + 1) / rate - time.time()))
    end = "\n" if step == steps - 1 else ""
    timing = f"0s {1000 / rate:.0f}ms/step" if end else "ETA: 0s"  # tf-keras: the time per step on the epoch's line only
    print(f"\r{step + 1}/{steps} [{'=' * (step + 1):<{steps}}] - {timing} - loss: {1 / (i + 1):.4f}", end=end, flush=True)
    if end and epoch + 1 < epochs:
        print(f"Epoch {epoch + 2}/{epochs}", flush=True)
