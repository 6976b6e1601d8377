"""gtest_test: one GoogleTest suite of the core, `<name>.cc` linked statically (the core is built
with hidden visibility) against GoogleTest's main. Every cc_test under tests/ that runs GoogleTest
is one of these, so what they share is said once."""

load("@rules_cc//cc:defs.bzl", "cc_test")

def gtest_test(name, deps, size = "small", srcs = None, own_main = False, **kwargs):
    """A GoogleTest suite.

    Args:
      name: the test's name; its source is `<name>.cc` unless `srcs` says otherwise.
      deps: what it links besides GoogleTest's main.
      size: Bazel's size (small unless it starts several LibTorch processes).
      srcs: the sources, when not only `<name>.cc`.
      own_main: the test defines main() itself (GoogleTest without its main).
      **kwargs: any other cc_test attribute (data, tags, shard_count, copts).
    """
    cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cc"],
        linkstatic = True,
        deps = deps + (["@gtest"] if own_main else ["@gtest//:gtest_main"]),
        **kwargs
    )
