"""LibTorch from the torch wheel that tools/setup installs, or from $DDPSPAWN_LIBTORCH.

DDPSPAWN_LIBTORCH may name an unpacked LibTorch (a folder with include/ and lib/) or the torch
folder of a wheel (site-packages/torch). CUDA and NCCL headers come from the wheel's nvidia-*
packages beside it, else from $CUDA_HOME (default /usr/local/cuda). NCCL is compiled in when
LibTorch has libtorch_cuda and c10d's ProcessGroupNCCL and the CUDA and NCCL headers are found.
"""

# Where tools/setup installs torch==2.11.0 (a virtual environment outside any clone) unless
# $DDPSPAWN_VENV names another.
DEFAULT_VENV = "/opt/ddpspawn/venv"

def _venv(ctx):
    return ctx.os.environ.get("DDPSPAWN_VENV", "") or DEFAULT_VENV

def _find_default_prefix(ctx):
    python = _venv(ctx) + "/bin/python3"
    if not ctx.path(python).exists:
        fail("no LibTorch: run tools/setup (it installs torch==2.11.0 into %s), " % _venv(ctx) +
             "or set DDPSPAWN_LIBTORCH to a LibTorch 2.x folder")
    found = ctx.execute([python, "-c", "import os, torch.utils; " +
                                       "print(os.path.dirname(os.path.dirname(torch.utils.__file__)))"])
    if found.return_code != 0:
        fail("%s cannot import torch: %s" % (python, found.stderr))
    return found.stdout.strip()

def _cuda_include_dirs(ctx, prefix):
    """Folders that hold cuda_runtime_api.h and nccl.h, for this LibTorch."""
    dirs = []
    nvidia = ctx.path(prefix + "/../nvidia")
    if nvidia.exists:
        for package in nvidia.readdir():
            if package.get_child("include").exists:
                dirs.append(str(package.get_child("include")))
    cuda_home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if ctx.path(cuda_home + "/include/cuda_runtime_api.h").exists:
        dirs.append(cuda_home + "/include")
    return sorted(dirs)

def _has_header(ctx, dirs, name):
    for d in dirs:
        if ctx.path(d + "/" + name).exists:
            return True
    return False

def _impl(ctx):
    prefix = ctx.os.environ.get("DDPSPAWN_LIBTORCH", "")
    if not prefix:
        prefix = _find_default_prefix(ctx)
    if not ctx.path(prefix + "/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp").exists:
        fail("%s is not a LibTorch 2.x with c10d (no include/torch/csrc/distributed/c10d)" % prefix)
    for name in ["include", "lib"]:
        ctx.symlink(prefix + "/" + name, name)

    # The venv's auditwheel, which makes the wheel; without it, a stand-in that says how to get it.
    auditwheel = _venv(ctx) + "/bin/auditwheel"
    if ctx.path(auditwheel).exists:
        ctx.symlink(auditwheel, "auditwheel")
    else:
        ctx.file("auditwheel", "#!/bin/sh\necho 'no %s: run tools/setup, which installs it' >&2\n" %
                               auditwheel + "exit 1\n", executable = True)

    cuda_dirs = _cuda_include_dirs(ctx, prefix)
    has_nccl = (
        ctx.path(prefix + "/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp").exists and
        ctx.path(prefix + "/lib/libtorch_cuda.so").exists and
        _has_header(ctx, cuda_dirs, "cuda_runtime_api.h") and
        _has_header(ctx, cuda_dirs, "nccl.h")
    )
    cuda_includes = []
    if has_nccl:
        for i, d in enumerate(cuda_dirs):
            ctx.symlink(d, "cuda_include/%d" % i)
            cuda_includes.append("cuda_include/%d" % i)
    ctx.template("BUILD.bazel", ctx.attr.build_file, substitutions = {
        "%{lib_dir}": prefix + "/lib",
        "%{cuda_defines}": '"USE_C10D_NCCL", "USE_CUDA",' if has_nccl else "",
        "%{with_cuda}": '"DDPSPAWN_WITH_CUDA",' if has_nccl else "",
        "%{cuda_libs}": '"-ltorch_cuda", "-lc10_cuda",' if has_nccl else "",
        "%{cuda_hdrs}": "".join(['"%s/**", ' % d for d in cuda_includes]),
        "%{cuda_includes}": "".join(['"%s", ' % d for d in cuda_includes]),
    })

system_libtorch = repository_rule(
    implementation = _impl,
    attrs = {"build_file": attr.label(default = "//third_party:libtorch.BUILD")},
    environ = ["DDPSPAWN_LIBTORCH", "DDPSPAWN_VENV", "CUDA_HOME"],
    local = True,
)
