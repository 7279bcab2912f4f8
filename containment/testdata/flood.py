# Containment 7: flood stdout/stderr (with args["byte"], default "f"), or
# return a result larger than the cap.
import os


def run(args, context):
    if args["mode"] == "result":
        return "r" * args["bytes"]
    fd = 1 if args["mode"] == "stdout" else 2
    block = bytes([args.get("byte", ord("f"))]) * (1 << 20)
    for _ in range(args["bytes"] // len(block)):
        os.write(fd, block)
    return {"flooded": args["bytes"]}
