"""Puts torch, and every distribution it requires, into another virtual environment, as a user's
venv would hold them after `pip install torch`: the files each distribution's RECORD lists are
hard-linked from this interpreter's environment (copied where a link cannot be made), so that no
test downloads torch again. Run with the Python whose environment holds torch (tools/setup's).

Usage: python3 copy_torch.py VENV
"""
import glob
import importlib.metadata as metadata
import os
import re
import shutil
import sys
import sysconfig


def closure(name):
    """torch and the installed distributions it requires, transitively, with the extras that a
    requirement names (torch's CUDA libraries come through cuda-toolkit[cudart,...])."""
    seen, todo = {}, [(name, set())]
    while todo:
        wanted, extras = todo.pop()
        wanted = re.sub(r"[-_.]+", "-", wanted).lower()
        if wanted not in seen:
            try:
                seen[wanted] = (metadata.distribution(wanted), set())
            except metadata.PackageNotFoundError:
                continue  # a requirement for another platform
        elif extras <= seen[wanted][1]:
            continue  # already followed with these extras
        dist, known = seen[wanted]
        known |= extras
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            asked = set(re.findall(r"extra == [\"']([^\"']+)[\"']", marker))
            if asked and not asked & known:
                continue  # an extra nobody asked for
            parsed = re.match(r"\s*([A-Za-z0-9._-]+)(?:\[([^\]]*)\])?", spec)
            wants = {e.strip() for e in (parsed.group(2) or "").split(",") if e.strip()}
            todo.append((parsed.group(1), wants))
    return [dist for dist, _ in seen.values()]


def place(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def main():
    venv = sys.argv[1]
    (site,) = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    here = sysconfig.get_paths()["purelib"]
    count = 0
    for dist in closure("torch"):
        for file in dist.files or []:
            source = os.path.normpath(dist.locate_file(file))
            if not source.startswith(here + os.sep) or not os.path.isfile(source):
                continue  # scripts in bin/ and the like: not needed to import torch
            if "__pycache__" in source:
                continue
            place(source, os.path.join(site, os.path.relpath(source, here)))
            count += 1
    print(f"copy_torch.py: {count} files of torch and what it requires into {site}")


if __name__ == "__main__":
    main()
