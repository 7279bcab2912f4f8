# Containment 2: burn CPU past the CPU limit, in this process ("single") or
# in several forked processes at once ("processes") while this one waits.
import os


def burn():
    while True:
        pass


def run(args, context):
    if args["mode"] == "single":
        burn()
    children = []
    for _ in range(args.get("processes", 3)):
        pid = os.fork()
        if pid == 0:
            burn()
        children.append(pid)
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
    return {"child_statuses": statuses}
