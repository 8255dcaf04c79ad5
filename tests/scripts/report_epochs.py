"""No TensorFlow: prints like the custom-loop tutorial and reports explicitly, to test the plumbing fast."""
import json
import os
import sys

import kwnb

task = json.loads(os.environ["TF_CONFIG"])["task"]
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for epoch in range(epochs):
    print(f"Epoch: {epoch}, accuracy: {0.5 + epoch / 10:f}, train_loss: {1.0 / (epoch + 1):f}.")
    kwnb.report(epoch=epoch, lr=0.01 * (epoch + 1))
print(f"task {task['type']} {task['index']} done")
