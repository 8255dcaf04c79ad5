"""The holder of a run's private network namespace (backends/netns.py starts it inside the namespace, by path,
as `python -S -I netns_holder.py KERNEL_PID`): it keeps the namespace alive, brings its loopback up, and
answers the kernel, which is outside and cannot connect to the tasks itself.

Standard library only. Requests come on stdin, one a line, each numbered ("7 probe HOST PORT"), and are
answered on one line that repeats the number ("7 1"), so that an answer that came after its asker gave up is
recognised and dropped: "probe HOST PORT" -> 1|0, "ports N" -> N free ports, "route" -> 1|0 (a default
route is up), "companion PID" -> ok (the user-mode networking tool, ended with the holder).
It ends when stdin closes or when its parent (the kernel) changes, as a task's bootstrap watchdog does.
"""
import fcntl
import os
import random
import signal
import socket
import struct
import sys
import threading
import time

PROBE_SECONDS = 0.05  # a connect inside the namespace answers in well under a millisecond
# Free ports are chosen below the ephemeral range (32768-60999), where the probes' own connections take theirs.
PORT_RANGE = (20000, 32000)
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

companion = [None]  # the pid of the user-mode networking tool, when there is one


def end(*_):
    if companion[0]:
        try:
            os.kill(companion[0], signal.SIGTERM)
        except OSError:
            pass
    os._exit(0)


def watch_parent(parent):  # as the tasks' bootstrap does: a SIGKILLed kernel re-parents us
    while os.getppid() == parent:
        time.sleep(0.5)
    end()


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH14s", b"lo", 0, b"")))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def probe(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_SECONDS):
            return "1"
    except OSError:
        return "0"


def ports(count):
    held, chosen = [], set()
    while len(chosen) < int(count):
        port = random.randrange(*PORT_RANGE)
        s = socket.socket()
        try:
            s.bind(("", port))
        except OSError:
            s.close()
            continue
        held.append(s)
        chosen.add(port)
    for s in held:
        s.close()
    return " ".join(map(str, chosen))


def route():
    with open("/proc/net/route") as table:
        return "1" if any(line.split()[1] == "00000000" for line in table.readlines()[1:]) else "0"


def answer(verb, args):
    if verb == "companion":
        companion[0] = int(args[0])
        return "ok"
    return {"probe": probe, "ports": ports, "route": route}[verb](*args)


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is the run's to handle
    loopback_up()
    threading.Thread(target=watch_parent, args=(int(sys.argv[1]),), daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        number, verb, *args = line.split()
        sys.stdout.write(f"{number} {answer(verb, args)}\n")
        sys.stdout.flush()
    end()


if __name__ == "__main__":
    main()
