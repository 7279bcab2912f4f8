"""execgate harness entry point.

The harness proper is the module execgate_harness next to this file: a script
is compiled from source at every start (~2 ms for the harness), while an
imported module loads the .pyc the rootfs build precompiled. -I drops this
directory from sys.path, so it is put back first.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import execgate_harness  # noqa: E402

execgate_harness.main(prewarm=True)
