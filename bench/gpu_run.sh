#!/usr/bin/env bash
# The GPU check in one command, on a CUDA machine without a registry (what the device tool lends):
#   bench/gpu_run.sh WHEELS OUT
# WHEELS: the wheels of requirements.lock that machine's Python lacks (jaclang, pydantic and its
# core, annotated-types, typing-inspection, gguf; transformers, peft and tokenizers where it holds
# other versions), installed into the interpreter that holds torch, so that the reward's `jac`
# launcher and its sandboxed runs see them as the workflow's own venv would. Each step then prints
# one JSON line ({"step", "rc", "s"}) and the next runs whatever it returned; logs go to OUT.
set -u
wheels=${1:?usage: bench/gpu_run.sh WHEELS OUT}
out=${2:?usage: bench/gpu_run.sh WHEELS OUT}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src" TQDM_DISABLE=1

step() {  # step NAME COMMAND...: one JSON line, the log's tail on failure
    local name=$1 t0=$SECONDS rc
    shift
    "$@" >"$out/$name.log" 2>&1
    rc=$?
    printf '{"step": "%s", "rc": %d, "s": %d}\n' "$name" "$rc" $((SECONDS - t0))
    [ "$rc" -eq 0 ] || tail -n 25 "$out/$name.log"
    return "$rc"
}

step install python3 -m pip install --no-index --no-deps --no-compile --upgrade "$wheels"/*.whl || exit 1
step versions python3 -c "import torch, transformers, peft, jaclang, pydantic, shutil
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), transformers.__version__, peft.__version__,
      shutil.which('jac'))"
cat "$out/versions.log"
step gpu_check python3 bench/gpu_check.py --out "$out/gpu_check.json" ||
    step gpu_check_weak python3 bench/gpu_check.py --isolation weak --out "$out/gpu_check.json"
step cuda_tests python3 -m pytest -q -p no:cacheprovider tests/rl/test_trainer.py -k cuda tests/bench/test_gpu_check.py
[ -f "$out/gpu_check.json" ] && cat "$out/gpu_check.json"
