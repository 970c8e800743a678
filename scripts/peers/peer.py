#!/usr/bin/env python3
"""The peer adapter under its old path: `tricklab parity --adapter` and the
golden-value scripts (scripts/golden) call it here. It lives in the Python
module that script matrices call (python/tricklab/peers.py, run there as
`python3 -m tricklab.peers`); README.md beside this file documents it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from tricklab import peers  # noqa: E402

if __name__ == "__main__":
    sys.exit(peers.entry())
# `import peer` is the module itself, its every name included.
sys.modules[__name__] = peers
