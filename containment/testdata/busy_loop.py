# Containment 1: a busy loop past the wall limit, with a child process that
# carries a marker in its command line so the test can look for survivors
# on the host.
import os
import sys


def run(args, context):
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "while True: pass", args["marker"]])
    while True:
        pass
