#!/usr/bin/env bash
# The wheel as a user installs it: `pip install` (offline) into a virtual environment of the
# test's own that holds torch, with tools/setup's venv and Debian's Abseil hidden for the run (see
# user_env.sh). Then, from / with an empty environment: the README's Python example, ddpspawn.fit,
# and examples/python/torch_model.py (ddpspawn.torch.DistributedDataParallel). Also: the wheel
# requires the torch release it was built against, and its tag is the one auditwheel reads from
# the library's symbol versions.
set -euo pipefail
source tests/install/user_env.sh
require_root
work="${TEST_TMPDIR:-$(mktemp -d)}"
wheel=$(echo bindings/python/ddpspawn-*.whl)
cp examples/python/hello.py examples/python/torch_model.py "$work/"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The tag: what auditwheel says the library's symbol versions constrain it to.
tag=${wheel##*-}
tag=${tag%.whl}
constraint=$("$setup_venv/bin/auditwheel" show "$wheel" 2>&1 | tr '\n' ' ' | tr -s ' ' |
  sed -n 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p')
[[ "$constraint" == "$tag" ]] || fail "the wheel is tagged $tag, auditwheel reads $constraint"
echo "ok: tag $tag, as auditwheel reads the library's symbol versions"

# Without torch in the environment, pip refuses it, naming the release.
/usr/bin/python3 -m venv "$work/bare"
if refusal=$(as_user "$work/bare/bin/python3" -m pip install --no-index --disable-pip-version-check \
  "$wheel" 2>&1); then
  fail "the wheel installed into a venv without torch"
fi
[[ "$refusal" == *"torch==2.11.*"* ]] || fail "pip's refusal does not name torch==2.11.*: $refusal"
echo "ok: without torch, pip refuses it: requires torch==2.11.*"

make_user_venv "$work/venv"
as_user "$work/venv/bin/python3" -m pip install -q --no-index --disable-pip-version-check "$wheel"

user_python() {  # user_python ARGS...: the venv's Python from /, env -i, setup's venv hidden
  as_user env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
    bash -c 'cd / && exec "$0" -W ignore "$@"' "$work/venv/bin/python3" "$@"
}

out=$(user_python "$work/hello.py")
[[ "$out" == *"{'total': [30], 'names': ['rank 0 of 2', 'rank 1 of 2']}"* ]] ||
  fail "hello.py printed '$out'"
echo "ok: README's example: $out"

where=$(user_python -c 'import ddpspawn; print(ddpspawn.library_path())')
[[ "$where" == "$work/venv/"*"/ddpspawn/libddpspawn.so.1" ]] ||
  fail "the library came from $where, not from the installed package"
if readelf -d "$where" | grep -q "$setup_venv"; then
  fail "$where names tools/setup's venv: $(readelf -d "$where" | grep -i path)"
fi
echo "ok: the library is the package's, and names no path of tools/setup's"

# CUDA support comes from the package too: asked for, it loads and finds no GPU here (a missing
# library would say "could not be loaded").
out=$(user_python -c '
import ddpspawn
def work(ctx):
    return ctx.rank
try:
    ddpspawn.spawn(work, nprocs=1, backend="nccl", start_method="fork")
except ddpspawn.DdpspawnError as e:
    print(e)
' 2>&1)
[[ "$out" == *"no CUDA device is present"* ]] || fail "backend nccl did not load CUDA support: $out"
echo "ok: CUDA support loads from the package (nccl: no CUDA device here)"

out=$(user_python "$work/torch_model.py")
[[ "$out" == *"(match)"* ]] || fail "torch_model.py printed '$out'"
echo "ok: ddpspawn.torch.DistributedDataParallel: $out"

# ddpspawn.fit: the built-in MLP learns y = x0 - x1 on 2 forked ranks.
out=$(user_python -c '
import random, sys, ddpspawn
random.seed(0)
rows = [[random.uniform(-1, 1) for _ in range(2)] for _ in range(128)]
with open(sys.argv[1] + "/train.csv", "w") as f:
    f.writelines(f"{a},{b},{a - b}\n" for a, b in rows)
result = ddpspawn.fit("mlp:2,16,1", sys.argv[1] + "/train.csv", nprocs=2, max_epochs=30,
                      lr=0.05, optimizer="adam", batch_size=16,
                      default_root_dir=sys.argv[1] + "/fit")
loss = result.metrics["train_loss_epoch"]
print(f"epochs={result.epoch} loss={loss:.4f}")
' "$work" | tail -n 1)
loss=$(sed -n 's/.*loss=//p' <<<"$out")
awk -v l="$loss" 'BEGIN { exit !(l < 0.01) }' || fail "ddpspawn.fit printed '$out', loss not below 0.01"
echo "ok: ddpspawn.fit: $out"
