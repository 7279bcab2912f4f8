# The tool of the clients' artifact tests (clients/python/tests/test_artifacts.py,
# clients/typescript/test/artifacts.test.ts): it reads an input file and its
# stdin and leaves three artifacts: report.csv (small: inline in the envelope),
# big.bin (100000 bytes, over the 64 KiB inline cap: fetched) and dot.png
# (saved with its media type).
import sys


def run(args, context):
    rows = open("data/in.csv").read().splitlines()
    with open("out/report.csv", "w") as f:
        f.write("%d,%s\n" % (len(rows), sys.stdin.read().strip()))
    with open("/workspace/out/big.bin", "wb") as f:
        f.write(bytes(range(250)) * 400)
    context.artifacts.save("dot.png", b"\x89PNG\r\n\x1a\n", mime="image/png")
    return len(rows)
