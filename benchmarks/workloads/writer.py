"""A worker that only prints, for the log-path benchmark (no TensorFlow: the kernel's side is measured).

  writer.py bulk N            N numbered lines as fast as print() goes, then exits
  writer.py latency RATE SEC  `LAT seq T` lines at a steady RATE per second for SEC seconds,
                              T being the time of the write (this process's clock)
"""
import sys
import time

PAD = "INFO worker log line of a typical length: loss=0.1234 accuracy=0.9876"


def bulk(count: int) -> None:
    for i in range(count):
        print(f"line {i:07d} {PAD}")


def latency(rate: float, seconds: float) -> None:
    start = time.time() + 0.2
    for seq in range(int(rate * seconds)):
        pause = start + seq / rate - time.time()
        if pause > 0:
            time.sleep(pause)
        print(f"LAT {seq} {time.time():.6f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "bulk":
        bulk(int(sys.argv[2]))
    else:
        latency(float(sys.argv[2]), float(sys.argv[3]))
