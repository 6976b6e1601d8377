"""The core's layers and the one macro its libraries are declared with.

A package of core/ may depend only on packages of lower layers (docs/ARCHITECTURE.md): each
library's visibility is the packages above its own, so a dependency that runs the wrong way fails
the build. core/layers_test.sh checks the #include lines against this same table.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

# Lowest first; packages of one layer do not depend on each other.
CORE_LAYERS = {
    "util": 0,
    "env": 1,
    "trace": 2,
    "launch": 3,
    "comm": 3,
    "ddp": 4,
    "job": 4,
    "version": 4,
    "model": 5,
    "strategy": 6,
    "train/data": 7,
    "train/models": 7,
    "train/callbacks": 7,
    "train/loggers": 7,
    "train/loop": 8,
    "fabric": 8,
    "train/run": 9,
}

# Everything outside core/ builds on it: the C ABI, the bindings, the tools, the tests.
_OUTSIDE_CORE = [
    "//core:__pkg__",  # the installable archive (cpp_dist)
    "//capi:__subpackages__",
    "//bindings:__subpackages__",
    "//examples:__subpackages__",
    "//fuzz:__subpackages__",
    "//tests:__subpackages__",
    "//tools:__subpackages__",
]

# Every core library: symbols hidden unless exported (.bazelrc adds the warnings).
_CORE_COPTS = ["-fvisibility=hidden"]

def _layer_of_this_package():
    package = native.package_name()
    name = package[len("core/"):] if package.startswith("core/") else package
    if name not in CORE_LAYERS:
        fail("%s has no layer in core/layers.bzl's CORE_LAYERS" % package)
    return CORE_LAYERS[name]

def _visible_above(layer):
    return ["//core/%s:__pkg__" % name for name, other in CORE_LAYERS.items() if other > layer] + _OUTSIDE_CORE

def core_cc_library(name, copts = [], visibility = None, **kwargs):
    """cc_library with the core's copts, visible only to the layers above this package's."""
    cc_library(
        name = name,
        copts = _CORE_COPTS + copts,
        visibility = visibility if visibility != None else _visible_above(_layer_of_this_package()),
        **kwargs
    )

def core_package_files(name = "sources"):
    """:sources (for core/layers_test.sh; `name`) and :headers (for the installable archive)."""
    _layer_of_this_package()
    native.filegroup(
        name = "headers",
        srcs = native.glob(["**/*.h"]),
        visibility = ["//core:__pkg__"],
    )
    native.filegroup(
        name = name,
        srcs = native.glob(["**/*.h", "**/*.cc"]),
        visibility = ["//core:__pkg__"],
    )
