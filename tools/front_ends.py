#!/usr/bin/env python3
"""Which front end has which run option: generates docs/options.md from the
option table (tools/options_rows) and what each front end's own source says.

The CLI and ddpspawn_run take every option of the table; Python's fit and
Rust's Trainer take every one as a keyword or .option(key, ..), except those
their own arguments set, which they refuse as options (Python's _DATA_KEYS
and _NPROCS_KEYS, Rust's RESERVED, read from their sources). The DDP options
also exist on the DDP wrappers, ddpspawn.torch.DistributedDataParallel (its
__init__'s keywords) and ddpspawn-tch (ddpspawn's ReducerBuilder methods),
under the names ALIASES gives, or REASONS says why not. A DDP option that a
wrapper lacks with no reason, or a reason for one it has, is an error.

Usage: front_ends.py OPTIONS_ROWS_BINARY (--check | --update) [REPO_ROOT]
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

# The options that configure DDP itself (the others: the run, the trainer).
DDP_OPTIONS = [
    "ddp_comm_hook", "find_unused_parameters", "static_graph", "sync_batchnorm",
    "gradient_as_bucket_view", "bucket_cap_mb", "first_bucket_cap_mb", "broadcast_buffers",
    "powersgd_rank", "powersgd_start_iteration", "ddp_comm_wrapper",
    "post_localsgd_start_iteration", "post_local_gradient_allreduce", "model_averaging_period",
]
# The wrappers' names for an option, where they differ from the table's.
ALIASES = {"ddp_comm_hook": "comm_hook"}
PY_DDP = "ddpspawn.torch.DistributedDataParallel"
TCH = "ddpspawn-tch"
# Why a wrapper lacks a DDP option.
REASONS = {
    (PY_DDP, "static_graph"): "not yet: the C reducer has no static_graph",
    (PY_DDP, "sync_batchnorm"): "torch.nn.SyncBatchNorm's group is torch.distributed's; "
                                "ddpspawn's is not one",
    (PY_DDP, "first_bucket_cap_mb"): "not yet",
    (PY_DDP, "ddp_comm_wrapper"): "not yet",
    (TCH, "static_graph"): "not yet: the C reducer has no static_graph",
    (TCH, "sync_batchnorm"): "tch has no SyncBatchNorm layer to give the group",
    (TCH, "gradient_as_bucket_view"): "not yet: Rust's reducer has no buffers_in_buckets",
    (TCH, "broadcast_buffers"): "not yet",
    (TCH, "ddp_comm_wrapper"): "not yet",
}
# Post-local SGD averages the parameters after each optimizer step, which a
# wrapper around a user's own loop does not take.
for _wrapper in (PY_DDP, TCH):
    for _option in ("post_localsgd_start_iteration", "post_local_gradient_allreduce",
                    "model_averaging_period"):
        REASONS[(_wrapper, _option)] = ("not yet: post-local SGD averages after the optimizer "
                                        "step, which the wrapper does not see")


def option_rows(binary):
    out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def python_refused(root):
    """Python's keys that its functions' arguments set, from _train.py."""
    tree = ast.parse((root / "bindings/python/ddpspawn/_train.py").read_text())
    keys = {"model": "the first argument"}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("_DATA_KEYS", "_NPROCS_KEYS"):
                for key in ast.literal_eval(node.value):
                    keys[key] = "nprocs=" if name == "_NPROCS_KEYS" else "a data argument"
    return keys


def rust_refused(root):
    """Rust's RESERVED keys and what sets each, from trainer.rs."""
    text = (root / "bindings/rust/ddpspawn/src/trainer.rs").read_text()
    block = text[text.index("const RESERVED"):]
    block = block[:block.index("];")]
    return dict(re.findall(r'\(\s*"(\w+)",\s*"([^"]+)",?\s*\)', block))


def python_ddp_keywords(root):
    tree = ast.parse((root / "bindings/python/ddpspawn/torch.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "DistributedDataParallel":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return {a.arg for a in item.args.args + item.args.kwonlyargs}
    raise SystemExit("front_ends.py: no DistributedDataParallel.__init__ in torch.py")


def tch_methods(root):
    text = (root / "bindings/rust/ddpspawn/src/reducer.rs").read_text()
    block = text[text.index("impl ReducerBuilder"):]
    return set(re.findall(r"pub fn (\w+)\(", block))


def wrapper_cell(wrapper, key, names, errors):
    name = ALIASES.get(key, key)
    reason = REASONS.get((wrapper, key))
    if name in names:
        if reason:
            errors.append(f"{wrapper} has {name}, but REASONS says why it lacks {key}")
        return f"`{name}`"
    if not reason:
        errors.append(f"{wrapper} lacks {key} (as {name}) and REASONS does not say why")
        return "missing"
    return f"no: {reason}"


def generate(binary, root):
    rows = option_rows(binary)
    keys = {row[0] for row in rows}
    errors = [f"DDP_OPTIONS names {k}, which the option table lacks"
              for k in DDP_OPTIONS if k not in keys]
    py_refused, rust_refused_keys = python_refused(root), rust_refused(root)
    for side, refused in (("Python", py_refused), ("Rust", rust_refused_keys)):
        errors += [f"{side} refuses {k}, which the option table lacks" for k in refused
                   if k not in keys]
    py_ddp, tch = python_ddp_keywords(root), tch_methods(root)
    lines = [
        "# Which front end has which option",
        "",
        "Generated by `tools/front_ends.py` from the option table (`core/train/run/run_option_table.cc`)",
        "and the bindings' sources; `//tools:front_ends_test` fails when this file is stale or a",
        "DDP wrapper lacks a DDP option without a stated reason. Regenerate with",
        "`bazel build //tools:options_rows && tools/front_ends.py bazel-bin/tools/options_rows",
        "--update`.",
        "",
        "Each front end's tests read this table and run what it claims: every Python and Rust",
        "`yes` is given a value it must refuse by name or record",
        "(`bindings/python/tests/test_front_end_options.py`,",
        "`bindings/rust/ddpspawn/tests/front_end_options.rs`), and every option a DDP wrapper",
        "names is seen to change one training step on two ranks against its default.",
        "",
        "The CLI takes each option as `--flag-name`, `ddpspawn_run` as `key=value`, Python's",
        "`fit`/`validate`/`test`/`predict` as keywords and Rust's `Trainer` as",
        "`.option(\"key\", value)`, except where a cell says what sets it instead; Java's",
        "`Trainer.run` takes `ddpspawn_run`'s keys as a `Map`. The DDP",
        "wrappers (for a user's own loop) have the DDP options under the names shown.",
        "",
        f"| Option | Section | Values (default) | CLI, `ddpspawn_run` | Python | Rust | "
        f"`{PY_DDP}` | `{TCH}` |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, section, value, default in rows:
        # A | in a cell ends it, even between backquotes.
        values = (f"`{value}`" + (f" ({default})" if default else "")).replace("|", "\\|")
        python = py_refused.get(key, "yes")
        rust = rust_refused_keys.get(key, "yes")
        if key in DDP_OPTIONS:
            py_cell = wrapper_cell(PY_DDP, key, py_ddp, errors)
            tch_cell = wrapper_cell(TCH, key, tch, errors)
        else:
            py_cell = tch_cell = ""
        flag = key.replace("_", "-")
        lines.append(f"| `{key}` | {section} | {values} | `--{flag}` | {python} | {rust} | "
                     f"{py_cell} | {tch_cell} |")
    return "\n".join(lines) + "\n", errors, len(rows)


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("--check", "--update"):
        raise SystemExit(__doc__)
    root = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(".")
    text, errors, count = generate(sys.argv[1], root)
    target = root / "docs/options.md"
    if sys.argv[2] == "--update":
        target.write_text(text)
    elif not target.exists() or target.read_text() != text:
        errors.append("docs/options.md is stale: run `bazel build //tools:options_rows && "
                      "tools/front_ends.py bazel-bin/tools/options_rows --update`")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        raise SystemExit(1)
    print(f"ok: docs/options.md lists the {count} options on every front end")


if __name__ == "__main__":
    main()
