"""Debian's rules_cc 0.0.4, patched to load under Bazel 4.2.3 (which lacks use_cpp_toolchain)."""

_PATCHED = [
    "cc/private/rules_impl/compiler_flag.bzl",
    "cc/private/rules_impl/cc_flags_supplier.bzl",
]

def _impl(ctx):
    ctx.execute(["cp", "-r", ctx.attr.path + "/.", "."])
    for f in _PATCHED:
        ctx.file(f, ctx.read(f).replace(', "use_cpp_toolchain"', "").replace(
            "use_cpp_toolchain()",
            '["@bazel_tools//tools/cpp:toolchain_type"]',
        ))

system_rules_cc = repository_rule(
    implementation = _impl,
    attrs = {"path": attr.string()},
    local = True,
)
