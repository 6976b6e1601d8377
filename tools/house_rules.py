#!/usr/bin/env python3
"""The house's rules that no compiler or formatter checks, as a check (tools/lint runs it):

- no source file in core/, capi/, bindings/ or tools/cli/ over MAX_LINES lines, but for the
  generated files and data tables named in EXEMPT with the reason;
- every library of core/ is declared with core_cc_library (core/layers.bzl), which gives it the
  layers' visibility: a plain cc_library there would be visible to any package;
- every core library with sources is in core/BUILD.bazel's CORE_LIBRARIES, the archive that
  tools/install ships to C++ consumers outside Bazel (each library's archive holds only its own
  objects: one left out is an undefined reference there), but for those in NOT_SHIPPED;
- tools/setup's venv is found through $DDPSPAWN_VENV everywhere: its default path appears only as
  the default of that variable (${DDPSPAWN_VENV:-...} in a shell script) or in the files named in
  VENV_DEFAULTS, which read the variable first.

Prints each breach and exits 1 if there is one. Usage: house_rules.py [REPO_ROOT]
"""

import re
import subprocess
import sys
from pathlib import Path

MAX_LINES = 600
SOURCE_DIRS = ("core/", "capi/", "bindings/", "tools/cli/")
SOURCE_SUFFIXES = (".h", ".c", ".cc", ".py", ".rs", ".sh", ".java", ".kt")
# path -> why it may be longer (none today).
EXEMPT: dict = {}
# label -> why tools/install's core archive leaves it out.
NOT_SHIPPED = {
    "//core/comm:nccl_support": "in libddpspawn_cuda.so, which the C library loads for CUDA only",
    "//core/model:lsan_suppressions": "LeakSanitizer's suppressions, for the sanitizer builds",
}
DEFAULT_VENV = "/opt/ddpspawn/venv"
# The files that hold DEFAULT_VENV as the fallback of $DDPSPAWN_VENV, each in one place.
VENV_DEFAULTS = (
    "third_party/system_libtorch.bzl",
    "tests/testing/venv.h",
    "bindings/rust/ddpspawn/tests/train/support.rs",
    "tools/fault_matrix.py",
    "tools/house_rules.py",
    "tools/setup",
)


def tracked(root):
    out = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def long_files(root, files):
    for path in files:
        if not path.startswith(SOURCE_DIRS) or not path.endswith(SOURCE_SUFFIXES):
            continue
        if path in EXEMPT:
            continue
        with open(root / path, encoding="utf-8", errors="replace") as f:
            count = sum(1 for _ in f)
        if count > MAX_LINES:
            yield (f"{path}: {count} lines, over {MAX_LINES}: split it into files of one "
                   "concern each")


def plain_core_libraries(root, files):
    for path in files:
        if not (path.startswith("core/") and path.endswith("BUILD.bazel")):
            continue
        text = (root / path).read_text(encoding="utf-8")
        for match in re.finditer(r"^cc_library\(", text, re.MULTILINE):
            line = text.count("\n", 0, match.start()) + 1
            yield (f"{path}:{line}: a plain cc_library in core/: declare it with core_cc_library "
                   "(core/layers.bzl), which gives it its layer's visibility")


def unshipped_core_libraries(root, files):
    core = (root / "core/BUILD.bazel").read_text(encoding="utf-8")
    start = core.index("CORE_LIBRARIES = [")
    shipped = set(re.findall(r'"(//core/[^"]+)"', core[start:core.index("]", start)]))
    for path in files:
        if not (path.startswith("core/") and path.endswith("/BUILD.bazel")):
            continue
        package = path[:-len("/BUILD.bazel")]
        text = (root / path).read_text(encoding="utf-8")
        for match in re.finditer(r"^core_cc_library\((.*?)^\)", text, re.MULTILINE | re.DOTALL):
            body = match.group(1)
            name = re.search(r'name = "([^"]+)"', body).group(1)
            if "testonly = True" in body or not re.search(r'"[^"]+\.cc"', body):
                continue  # a test's, or headers only
            label = f"//{package}" if name == package.split("/")[-1] else f"//{package}:{name}"
            if label not in shipped and label not in NOT_SHIPPED:
                line = text.count("\n", 0, match.start()) + 1
                yield (f"{path}:{line}: {label} is not in core/BUILD.bazel's CORE_LIBRARIES: "
                       "tools/install's core archive would lack its objects (or name it in "
                       "NOT_SHIPPED with the reason)")


def fixed_venv_paths(root, files):
    for path in files:
        if path in VENV_DEFAULTS or path.endswith(".md") or path.startswith(".ci/"):
            continue
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for match in re.finditer(re.escape(DEFAULT_VENV), text):
            if text[:match.start()].endswith("${DDPSPAWN_VENV:-"):
                continue
            line = text.count("\n", 0, match.start()) + 1
            yield (f"{path}:{line}: {DEFAULT_VENV} written out: take it from $DDPSPAWN_VENV "
                   "(a shell's ${DDPSPAWN_VENV:-...}; tests/testing/venv.h in C++), as tools/setup "
                   "does")


def main(argv):
    root = Path(argv[1] if len(argv) > 1 else ".")
    files = tracked(root)
    breaches = (list(long_files(root, files)) + list(plain_core_libraries(root, files)) +
                list(unshipped_core_libraries(root, files)) + list(fixed_venv_paths(root, files)))
    for breach in breaches:
        print(breach, file=sys.stderr)
    if breaches:
        return 1
    print(f"house rules: {len(files)} tracked files checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
