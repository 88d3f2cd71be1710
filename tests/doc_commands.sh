#!/usr/bin/env bash
# Runs every shell command line of README.md and docs/*.md as a user would: tests/doc_commands.sh SOURCE_DIR BUILD_DIR MPI(ON|OFF) FUZZ(ON|OFF).
#
# The lines are those of fenced ```sh blocks, split at `&&`, without trailing comments. A line that
# is not in the tables below runs and must exit 0, so a new documented command is tested as soon
# as it is written. The tables say what one line of a command's output must match, which lines
# cannot run on a CPU machine in CI (and why), and which run shortened. A table entry that no
# longer matches a documented line fails the test, so the tables cannot go stale.
#
# How the commands run (CTest label `docs`; cmake/docs_test.cmake registers it):
#   - each in a fresh folder of its own that shows the source tree (README.md, docs/, fuzz/, tools/,
#     ...) and, as `build/`, BUILD_DIR's entries, so `build/tools/mpx` is this build and every
#     default --out folder (and build/fuzz-logs) lands in the temporary folder, never in the tree or
#     the build; a folder holds one run (docs/cli.md),
#     so separate folders keep one documented run from refusing the next. A command that reads a
#     file under out/NAME/ (--resume out/train/checkpoint.safetensors) runs in the folder of the
#     first command that wrote out/NAME, in the docs' order: in a single folder that run would
#     own out/NAME and later ones would be refused there.
#   - `mpx` is on PATH (BUILD_DIR/tools), as the docs' `mpx ...` and `mpirun -np 2 mpx ...` assume.
#   - MPX_MAX_STEPS=2: train, dcgan and gpt stop after 2 training steps, as --prof 2 does, with a
#     checkpoint (docs/cli.md). MPX_PROGRESS=plain. OMP_NUM_THREADS=1: CTest runs other tests beside
#     this one, and OpenMP threads that wait for a busy core make small models many times slower.
#   - Open MPI may run as root (CI containers) and put 2 ranks on fewer cores, unpinned;
#     MPX_DISTRIBUTED_TIMEOUT ends a lost rank's job instead of hanging.
#   - input.txt, the docs' name for a text file of the user's, is a copy of README.md.
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: tests/doc_commands.sh SOURCE_DIR BUILD_DIR MPI(ON|OFF) FUZZ(ON|OFF)" >&2; exit 2; }
src=$(cd "$1" && pwd) || exit 2
build=$(cd "$2" && pwd) || exit 2
have_mpi=$3 have_fuzz=$4
limit_s=${MPX_DOC_COMMAND_TIMEOUT:-300}  # per command; a documented command that hangs fails

# ---- the tables --------------------------------------------------------------------------------
# An entry names a documented line exactly (after the comment is cut); one ending in " ..." names
# every line that starts with the text before it.
declare -A expect=() skip=() shorten=() why=() used=()
check() { expect[$1]=$2; }                         # COMMAND REGEX: a line of its output must match
skip() { skip[$1]=$2; }                            # COMMAND WHY: not run, and why
short() { shorten[$1]=$2; why[$1]=$3; }            # COMMAND INSTEAD WHY: run shortened

skip 'tools/install-deps.sh' 'installs Debian packages with apt (root, network); .ci/run runs it before the build'
skip 'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release' 'configures the build this test runs from; .ci/run runs it'
skip 'cmake --build build -j2' 'builds the tree this test runs from; .ci/run runs it'
skip 'ctest --test-dir build -j2 --output-on-failure --timeout 900' 'runs the suite this test is part of; .ci/run runs it'
skip 'tools/sanitize.sh build-asan' 'a sanitized build and run of the whole suite, over an hour on 2 cores; its results are in docs/hardening.md'
skip 'tools/sanitize.sh --thread' 'a ThreadSanitizer build of the library, most of an hour on 2 cores; its results are in docs/hardening.md'
skip 'build/tools/mpx train -a resnet18 --opt-level O2 -b 64 --out out/imagenet DIR' \
  'DIR stands for an ImageNet-style folder, which is not installed (image folders are trained on in test_cli_runs)'
skip "mpx gpt --tokens 'fineweb_train_*.bin' --val-tokens 'fineweb_val_*.bin' --arch gpt2 --device cuda" \
  'needs a GPU and FineWeb token shards, neither on a CI machine (shards are read in test_text_data and test_cli_gpt)'
skip 'python3 -c "import tiktoken ...' 'needs tiktoken and numpy (not installed) and tiktoken downloads the GPT-2 vocabulary'
skip 'mpirun -np 2 ./my_training_program' "stands for the user's own program"
skip 'bench/run_gpt_cpu.sh build PYTHON [STEPS] [MODEL]' \
  'a usage line: PYTHON must be a Python with PyTorch (not installed), and the benchmark runs for minutes'
short 'fuzz/run_all.sh 600 build' 'fuzz/run_all.sh 1 build' 'ten minutes per target; the same line for 1 s per target'
short 'fuzz/run.sh build/fuzz-build/fuzz/fuzz_image image 3600 -jobs=2' \
  'fuzz/run.sh build/fuzz-build/fuzz/fuzz_image image 2 -jobs=2' 'an hour; the same line for 2 s'

check 'build/tools/mpx train --epochs 1' '^mpx train: small_cnn on fashion-mnist \(60000 train / 10000 test images\), batch 128'
check 'build/tools/mpx train --resume out/train/checkpoint.safetensors --epochs 10' \
  '^resumed from out/train/checkpoint.safetensors: epoch 1, step 2 of 468'
check 'build/tools/mpx train --resume out/train/checkpoint.safetensors -e' '^evaluate: top-1 [0-9.]+%  top-5 [0-9.]+%  .*\(10000 images'
check 'build/tools/mpx train -a resnet20 --epochs 6 --out out/resnet20' '^mpx train: resnet20 on fashion-mnist'
check 'build/tools/mpx dcgan --epochs 1' '^Profiling ended at iteration 2; wrote out/dcgan/samples_epoch1.png'
check 'build/tools/mpx info' '^distributed: '
check 'mpirun -np 2 mpx train --epochs 8 -b 64' '^mpx train: small_cnn on fashion-mnist .*batch 64 per rank x 2 ranks'
check 'mpx train --nproc-per-node 2 --epochs 8 -b 64 --sync-bn' '^synchronized batch norm \(--sync-bn\)'
check 'mpx train --nproc-per-node 2 --epochs 8 -b 64' '^Profiling ended at iteration 2 \(epoch 1 step 2\)'
check 'mpirun -np 2 mpx dcgan --epochs 5' '^mpx dcgan: .*batch 64 per rank x 2 ranks'
check 'mpx gpt --steps 300 --sample 200' '^mpx gpt: gpt-tiny \(.* on the license texts of '
check 'mpx gpt --text input.txt --arch gpt-mini' '^mpx gpt: gpt-mini \(.* on text input.txt'
check 'mpx gpt --resume out/gpt/checkpoint.safetensors --generate "The " --sample 300 --top-k 10' '^The '
check 'fuzz/run_all.sh 600 build' '^image +[0-9]+ execs +[0-9]+ execs/s .* clean$'
check 'fuzz/run.sh build/fuzz-build/fuzz/fuzz_image image 3600 -jobs=2' '^=+ Job 1 exited with exit code 0'

# ---- the documented lines ----------------------------------------------------------------------
cd "$src" || exit 2
docs=(README.md)
while IFS= read -r f; do docs+=("$f"); done < <(LC_ALL=C ls docs/*.md 2>/dev/null)
# file:line<TAB>command, one per `&&`-separated command; quotes are respected when cutting a
# comment (a # after a blank) or splitting.
lines=$(awk -v Q="'" '
  function emit(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); gsub(/[ \t]+/, " ", s); if (s != "") print FILENAME ":" at "\t" s }
  /^```sh[ \t]*$/ { inblock = 1; next }
  /^```/ { inblock = 0; next }
  !inblock { next }
  {
    if (pending == "") at = FNR
    text = pending $0
    if (text ~ /\\$/) { pending = substr(text, 1, length(text) - 1) " "; next }
    pending = ""
    seg = ""; q = ""
    for (i = 1; i <= length(text); i++) {
      c = substr(text, i, 1)
      if (q != "") { seg = seg c; if (c == q) q = ""; continue }
      if (c == Q || c == "\"") { q = c; seg = seg c; continue }
      if (c == "#" && (i == 1 || substr(text, i - 1, 1) ~ /[ \t]/)) break
      if (c == "&" && substr(text, i + 1, 1) == "&") { emit(seg); seg = ""; i++; continue }
      seg = seg c
    }
    emit(seg)
  }' "${docs[@]}")
[ -n "$lines" ] || { echo "FAIL: no command lines found in README.md and docs/*.md (\`\`\`sh blocks)"; exit 1; }

# The table entry a command falls under ("" when none).
entry_of() {
  local cmd=$1 k
  for k in "${!skip[@]}" "${!shorten[@]}" "${!expect[@]}"; do
    if [ "$k" = "$cmd" ] || { [[ $k == *" ..." ]] && [ "${cmd:0:${#k}-4}" = "${k%" ..."}" ]; }; then
      printf '%s' "$k"
      return
    fi
  done
}

# ---- running them ------------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpx_doc_commands.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
export PATH="$build/tools:$PATH" MPX_MAX_STEPS=2 MPX_PROGRESS=plain OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none MPX_DISTRIBUTED_TIMEOUT=120
declare -A seen=() owner=()
n_run=0 n_skip=0 n_fail=0 k=0
start_all=$(date +%s)
while IFS=$'\t' read -r where cmd; do
  if [ -n "${seen[$cmd]:-}" ]; then
    echo "same as ${seen[$cmd]}: $cmd"
    continue
  fi
  seen[$cmd]=$where
  key=$(entry_of "$cmd")
  [ -n "$key" ] && used[$key]=1
  if [ -n "$key" ] && [ -n "${skip[$key]:-}" ]; then
    echo "not run ($where): $cmd"
    echo "    because: ${skip[$key]}"
    n_skip=$((n_skip + 1))
    continue
  fi
  # What this build lacks is said, not passed over: the line names the build option.
  if [[ $cmd == mpirun* || $cmd == *--nproc-per-node* ]] && [ "$have_mpi" != ON ]; then
    echo "not run ($where): $cmd"
    echo "    because: this build has no MPI (-DMPX_DISTRIBUTED; install openmpi-bin and libopenmpi-dev)"
    n_skip=$((n_skip + 1))
    continue
  fi
  if [[ $cmd == fuzz/* ]] && [ "$have_fuzz" != ON ]; then
    echo "not run ($where): $cmd"
    echo "    because: this build has no fuzz targets (-DMPX_FUZZ_TESTS; needs clang and libclang-rt-14-dev)"
    n_skip=$((n_skip + 1))
    continue
  fi
  run=$cmd
  if [ -n "$key" ] && [ -n "${shorten[$key]:-}" ]; then
    run=${shorten[$key]}
    echo "shortened ($where): $cmd"
    echo "    runs as: $run  (${why[$key]})"
  fi
  # A command reading out/NAME/... runs where out/NAME was first written.
  dir=""
  for ref in $(grep -oE '(^|[ =])out/[^/ ]+/' <<<"$run" | tr -d ' ='); do
    dir=${owner[${ref%/}]:-}
  done
  if [ -z "$dir" ]; then
    k=$((k + 1))
    dir=$tmp/$k
    mkdir -p "$dir"
    for e in "$src"/*; do
      case ${e##*/} in build | out) ;; *) ln -s "$e" "$dir/${e##*/}" ;; esac
    done
    # build/ holds links to the build's entries, so what a command writes there (fuzz/run_all.sh's
    # build/fuzz-logs) stays in this folder instead of clobbering a developer's own runs.
    mkdir "$dir/build"
    for e in "$build"/*; do
      case ${e##*/} in fuzz-logs) ;; *) ln -s "$e" "$dir/build/${e##*/}" ;; esac
    done
    rm -f "$dir/input.txt" && cp "$src/README.md" "$dir/input.txt"
  fi
  t0=$(date +%s.%N)
  # stdin is not the list being read: mpirun would swallow it.
  (cd "$dir" && timeout -k 10 "$limit_s" bash -c "$run") < /dev/null > "$tmp/out.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  for o in "$dir"/out/*; do
    if [ -d "$o" ] && [ -z "${owner[out/${o##*/}]:-}" ]; then owner[out/${o##*/}]=$dir; fi
  done
  n_run=$((n_run + 1))
  problem=""
  if [ $rc -ne 0 ]; then
    problem="exit status $rc$([ $rc -eq 124 ] && echo " (stopped after $limit_s s)")"
  elif [ -n "$key" ] && [ -n "${expect[$key]:-}" ] && ! grep -qE -- "${expect[$key]}" "$tmp/out.log"; then
    problem="no line of its output matches /${expect[$key]}/"
  fi
  if [ -n "$problem" ]; then
    n_fail=$((n_fail + 1))
    echo "FAIL ($where, ${secs} s): $run"
    echo "    $problem; its output ends:"
    tail -n 25 "$tmp/out.log" | sed 's/^/    | /'
  elif [ -n "$key" ] && [ -n "${expect[$key]:-}" ]; then
    echo "ok ($where, ${secs} s): $run"
    echo "    $(grep -m1 -E -- "${expect[$key]}" "$tmp/out.log" | cut -c1-160)"
  else
    echo "ok ($where, ${secs} s): $run"
    echo "    (exit status 0; no output line to check is listed for it in tests/doc_commands.sh)"
  fi
done <<<"$lines"

stale=0
for key in "${!skip[@]}" "${!shorten[@]}" "${!expect[@]}"; do
  if [ -z "${used[$key]:-}" ]; then
    echo "FAIL: tests/doc_commands.sh lists a command no document has any more (update or remove it): $key"
    stale=1
  fi
done
echo "documented commands: $n_run run ($n_fail failed), $n_skip not run; $(( $(date +%s) - start_all )) s"
[ $n_fail -eq 0 ] && [ $stale -eq 0 ]
