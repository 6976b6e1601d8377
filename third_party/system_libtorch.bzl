"""LibTorch from a prefix: $DDPSPAWN_LIBTORCH if set (e.g. a CUDA build with NCCL), else /usr."""

def _impl(ctx):
    prefix = ctx.os.environ.get("DDPSPAWN_LIBTORCH", "/usr")
    for name in ["include", "lib"]:
        ctx.symlink(prefix + "/" + name, name)
    has_nccl = ctx.path(prefix + "/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp").exists and (
        ctx.path(prefix + "/lib/libtorch_cuda.so").exists
    )
    ctx.template("BUILD.bazel", ctx.attr.build_file, substitutions = {
        "%{lib_dir}": prefix + "/lib",
        "%{cuda_defines}": '"USE_C10D_NCCL",' if has_nccl else "",
        "%{cuda_libs}": '"-ltorch_cuda",' if has_nccl else "",
    })

system_libtorch = repository_rule(
    implementation = _impl,
    attrs = {"build_file": attr.label(default = "//third_party:libtorch.BUILD")},
    environ = ["DDPSPAWN_LIBTORCH"],
    local = True,
)
