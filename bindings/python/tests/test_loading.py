"""Tests of how the library is found and loaded, and of the declared C ABI."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ddpspawn
from ddpspawn import _lib

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
HEADERS = PACKAGE_ROOT.parent.parent / "capi" / "include" / "ddpspawn"
HEADER = HEADERS / "ddpspawn.h"


def run_python(code, env, cwd):
    """Runs code in a fresh interpreter; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("DDPSPAWN_LIBRARY", "PYTHONPATH")}
    env.update(extra)
    return env


def test_versions():
    assert ddpspawn.abi_version() == 1
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", ddpspawn.library_version())
    assert ddpspawn.__version__ == "0.1.0"


def test_build_info_names_libtorch_2_and_the_backends():
    info = ddpspawn.build_info()
    assert set(info) == {"version", "torch", "cuda", "nccl", "backends"}
    assert info["version"] == ddpspawn.library_version()
    assert info["torch"].split(".")[0] == "2"
    assert info["backends"].split(",")[0] == "gloo"
    import torch

    assert info["torch"] == torch.__version__.split("+")[0]


def test_library_path_is_the_one_asked_for():
    assert ddpspawn.library_path() == os.path.abspath(os.environ["DDPSPAWN_LIBRARY"])


def test_launcher_is_not_a_worker():
    assert ddpspawn.is_worker() is False


@pytest.mark.skipif(not HEADER.exists(), reason="public header not in this tree")
def test_every_header_function_is_declared():
    text = HEADER.read_text() + (HEADERS / "ddpspawn_dlpack.h").read_text()
    declared = set(re.findall(r"\b(ddpspawn_\w+)\s*\(", text))
    # Typedefs, and the status type before a function pointer field's "(*".
    declared -= {"ddpspawn_worker_fn", "ddpspawn_fork_hook", "ddpspawn_status"}
    assert declared == set(_lib.SIGNATURES)
    library = _lib.lib()
    for name in declared:
        assert getattr(library, name).argtypes is not None, name


def test_the_torch_submodule_loads_on_first_access(tmp_path):
    """`import ddpspawn` then `ddpspawn.torch.X`, as the README writes it; torch only then."""
    pytest.importorskip("torch")
    result = run_python(
        "import sys\n"
        "import ddpspawn\n"
        "print('before', 'torch' in sys.modules)\n"
        "print(ddpspawn.torch.DistributedDataParallel.__name__)\n"
        "print('after', 'torch' in sys.modules)\n"
        "try:\n"
        "    ddpspawn.nothing_here\n"
        "except AttributeError as error:\n"
        "    print('missing:', error)\n",
        {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "before False",
        "DistributedDataParallel",
        "after True",
        "missing: module 'ddpspawn' has no attribute 'nothing_here'",
    ]


def test_missing_library_is_a_clear_import_error(tmp_path):
    missing = tmp_path / "nowhere" / "libddpspawn.so.1"
    result = run_python(
        "import ddpspawn\n"
        "try:\n"
        "    ddpspawn.abi_version()\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n",
        clean_env(DDPSPAWN_LIBRARY=str(missing), PYTHONPATH=str(PACKAGE_ROOT)),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "LibraryLoadError" in result.stdout
    assert str(missing) in result.stdout
    assert "DDPSPAWN_LIBRARY" in result.stdout


def test_file_that_is_not_a_library_is_rejected(tmp_path):
    bogus = tmp_path / "libddpspawn.so.1"
    bogus.write_text("not an ELF file")
    result = run_python(
        "import ddpspawn\nddpspawn.abi_version()\n",
        clean_env(DDPSPAWN_LIBRARY=str(bogus), PYTHONPATH=str(PACKAGE_ROOT)),
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "LibraryLoadError" in result.stderr
    assert str(bogus) in result.stderr


def test_library_next_to_the_package_is_found(tmp_path):
    package = tmp_path / "ddpspawn"
    shutil.copytree(PACKAGE_ROOT / "ddpspawn", package)
    shutil.copy(os.environ["DDPSPAWN_LIBRARY"], package / "libddpspawn.so.1")
    result = run_python(
        "import ddpspawn\nprint(ddpspawn.library_path())\nprint(ddpspawn.abi_version())\n",
        clean_env(PYTHONPATH=str(tmp_path)),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    path, abi = result.stdout.split()
    assert Path(path).resolve() == (package / "libddpspawn.so.1").resolve()
    assert abi == "1"
