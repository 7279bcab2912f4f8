# Item 29: the tool bridge driven by hand, bypassing execgate_runtime's own
# checks: raw frames on fd 5, an ungranted tool, arguments over the per-call
# cap, a pipelined flood, then a frame of another protocol version.
import json
import os
import threading

FD = 5


def send(msg):
    data = json.dumps(msg).encode()
    os.write(FD, len(data).to_bytes(4, "big") + data)


def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(FD, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def recv():
    n = int.from_bytes(read_exact(4), "big")
    return json.loads(read_exact(n))


def outcome(a):
    return a["error"]["type"] if a.get("error") else "ok"


def run(args, context):
    out = {}
    send({"v": 1, "id": 1, "op": "run", "name": "shell.exec", "args": {"cmd": "id"}})
    out["ungranted"] = outcome(recv())
    send({"v": 1, "id": 2, "op": "run", "name": "math.add", "args": {"a": 1, "b": 2, "pad": "x" * (300 << 10)}})
    out["oversized_args"] = outcome(recv())
    n = args["flood"]

    def writer():
        for i in range(n):
            send({"v": 1, "id": 100 + i, "op": "run", "name": "math.add", "args": {"a": i, "b": 1}})

    w = threading.Thread(target=writer)
    w.start()
    counts, ids = {}, set()
    for _ in range(n):
        a = recv()
        ids.add(a["id"])
        counts[outcome(a)] = counts.get(outcome(a), 0) + 1
    w.join()
    out["flood"] = counts
    out["flood_ids"] = len(ids)
    send({"v": 2, "id": 9, "op": "run", "name": "math.add", "args": {}})
    a = recv()
    out["other_version"] = outcome(a)
    try:
        recv()
        out["after"] = "open"
    except (EOFError, OSError):
        out["after"] = "closed"
    return out
