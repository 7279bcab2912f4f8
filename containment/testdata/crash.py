# Containment 6: the interpreter itself dies (segfault or abort).
import os


def run(args, context):
    if args["mode"] == "segfault":
        import ctypes

        ctypes.string_at(0)
    os.abort()
