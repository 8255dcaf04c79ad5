"""A worker that does nothing for a while (argv[1] seconds): the supervisor's own cost is what is left."""
import sys
import time

time.sleep(float(sys.argv[1]))
