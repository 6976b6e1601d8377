"""Builds the ddpspawn wheel that carries libddpspawn.so.1 inside the package (found there first,
after $DDPSPAWN_LIBRARY), with the standard library only: a wheel is a zip file with a .dist-info
folder (PEP 427). The library's RUNPATH names the LibTorch it was built against, so the wheel is
for machines that have that LibTorch at the same place (tools/setup's).

Usage: python3 make_wheel.py OUT.whl LIBRARY FILE...   (the FILEs under a ddpspawn/ folder are
the package's; others are ignored)
"""
import base64
import hashlib
import os
import re
import sys
import zipfile

TAG = "py3-none-linux_x86_64"  # pure Python, with a native library that is not an extension


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    out, library = sys.argv[1], sys.argv[2]
    sources = [s for s in sys.argv[3:] if "/ddpspawn/" in "/" + s]  # the package's files
    init = next(s for s in sources if s.endswith("ddpspawn/__init__.py"))
    with open(init) as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.MULTILINE).group(1)
    if not os.path.basename(out).startswith(f"ddpspawn-{version}-{TAG}"):
        sys.exit(f"make_wheel.py: {out} does not name version {version} and tag {TAG}: "
                 "update the wheel's name in bindings/python/BUILD.bazel")
    dist_info = f"ddpspawn-{version}.dist-info"
    files = {}
    for source in sources:
        relative = "ddpspawn/" + source.split("ddpspawn/", 1)[1]
        with open(source, "rb") as f:
            files[relative] = f.read()
    with open(library, "rb") as f:
        files["ddpspawn/libddpspawn.so.1"] = f.read()
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\nName: ddpspawn\nVersion: %s\nRequires-Python: >=3.8\n"
        "Summary: Spawn data-parallel worker processes and run collectives "
        "(ctypes binding of libddpspawn)\n" % version).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: ddpspawn make_wheel.py\nRoot-Is-Purelib: false\n"
        "Tag: %s\n" % TAG).encode()
    record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so.1") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
