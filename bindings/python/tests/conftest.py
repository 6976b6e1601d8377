"""pytest setup: import ddpspawn and the test workers from this checkout, and
find the C library.

DDPSPAWN_LIBRARY, when set (the Bazel test wrapper sets it), names the library;
otherwise the one Bazel builds in this clone is used.
"""

import os
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent  # bindings/python
REPO_ROOT = PACKAGE_ROOT.parent.parent

# The worker helpers must be importable by module name in spawned workers,
# which get the launcher's sys.path.
for path in (str(TESTS_DIR), str(PACKAGE_ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

os.environ.setdefault(
    "DDPSPAWN_LIBRARY", str(REPO_ROOT / "bazel-bin" / "capi" / "libddpspawn.so.1")
)
