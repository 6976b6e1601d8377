"""Entry point of a spawn-mode worker: ``python -m ddpspawn._worker PAYLOAD``.

The launcher starts one such interpreter per rank. It reads the payload the
launcher wrote, imports fn, and runs it through :func:`ddpspawn._run.run_rank`.
Nothing here may run on import: this module is executed as ``__main__``.
"""

from __future__ import annotations

import sys
from typing import List

from ddpspawn import _payload, _run


def main(argv: List[str]) -> int:
    """Runs this rank; returns the process exit code."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m ddpspawn._worker PAYLOAD\n")
        return 2
    try:
        fn, args, backend = _payload.load_target(_payload.read(argv[1]))
    except BaseException:
        code = _run.report_exception()
        _run.flush_std_streams()
        return code
    return _run.run_rank(fn, args, backend)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
