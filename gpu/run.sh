#!/usr/bin/env bash
# The GPU check of Spindle, run from the bundle `cargo xtask gpu` builds, on a
# machine with an NVIDIA GPU and no Rust toolchain.
#
#   ./run.sh OUT_DIR [STAGE ...]
#
# Stages (all when none is named), each logged to OUT_DIR/<stage>.log:
#   corpus     every corpus entry on the GPU against the reference evaluator
#   sanitizer  compute-sanitizer memcheck on six kernels, racecheck on three
#   smoke      the plain command on one SpMM, f32 and f16, checked and timed
#              (not in the default list: the suites cover it)
#   pointcloud the bunny's submanifold convolution from its .xyz file (kernel
#              map by subsection iteration, GroupCOO by offset), checked and timed
#   levels     the level path and ReACT's program kernels as a user runs them
#              (CSR SpMM a warp per row, SpMV under reduce=parallel(R), SDDMM,
#              SDDMM into SpMM under fusion=trie and none), checked and timed
#   spmm       spindle bench spmm --target cuda (GroupCOO over g vs cuSPARSE CSR)
#   bsr        spindle bench bsr --target cuda (BlockGroupCOO vs cuSPARSE BSR, cuBLAS)
#   torch      the same computations through PyTorch (when python3 imports torch)
#   summary    OUT_DIR/<gpu>-<date>.json and the summary table
# A stage that fails is reported and the others still run; the exit code is 1
# when any failed. Where one command may run only minutes, run the stages one
# call at a time with SPINDLE_GPU_WORK naming a folder that outlives the calls,
# so CUBINs and autotuning results are reused.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: run.sh OUT_DIR [corpus sanitizer smoke pointcloud levels spmm bsr torch summary]}"
shift
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(corpus sanitizer pointcloud levels spmm bsr torch summary)
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="${SPINDLE_GPU_WORK:-$out/work}"
mkdir -p "$work"

spindle="$here/bin/spindle"
corpus="$here/bin/spindle-corpus"
export SPINDLE_DATA="$here/data"
export SPINDLE_CORPUS_DIR="$here/corpus"
export SPINDLE_CACHE_DIR="$work/c-cache"
export SPINDLE_CUDA_CACHE_DIR="$work/cuda-cache"

say() { printf '== %s\n' "$*" >&2; }

# NVRTC and the CUDA headers for the kernels Spindle compiles at run time: a
# folder with lib/libnvrtc.so.13 (+ builtins) and include/{cuda_fp16.h,mma.h,crt/mma.h}.
# Candidates: $SPINDLE_CUDA_ROOT, the nvidia/cu13 wheels beside PyTorch, the
# toolkit nvcc belongs to. A shim folder of links gives each the lib/ include/
# layout Spindle expects.
find_cuda_root() {
  local candidates=()
  [ -n "${SPINDLE_CUDA_ROOT:-}" ] && candidates+=("$SPINDLE_CUDA_ROOT")
  local wheels
  wheels="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null || true)"
  [ -n "$wheels" ] && candidates+=("$wheels")
  if command -v nvcc >/dev/null 2>&1; then
    candidates+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")")
  fi
  candidates+=(/usr/local/cuda)
  local c lib inc
  for c in "${candidates[@]}"; do
    for lib in "$c/lib" "$c/lib64" "$c/targets/x86_64-linux/lib"; do
      [ -e "$lib/libnvrtc.so.13" ] || continue
      ls "$lib"/libnvrtc-builtins.so.13* >/dev/null 2>&1 || continue
      for inc in "$c/include" "$c/targets/x86_64-linux/include"; do
        # mma.h includes crt/mma.h: PyTorch's cu13 wheels ship the first
        # without the second (seen on an H100 machine, 2026-11-25).
        if [ -e "$inc/cuda_fp16.h" ] && [ -e "$inc/mma.h" ] && [ -e "$inc/crt/mma.h" ]; then
          # lib/ holds links to NVRTC only, plus libnvrtc.so: cudarc tries
          # that name first, and with this folder first on LD_LIBRARY_PATH it
          # resolves to the copy Spindle loaded, not another toolkit's.
          local shim="$work/cuda-root"
          rm -rf "$shim" && mkdir -p "$shim/lib"
          local f
          for f in "$lib"/libnvrtc*; do ln -s "$f" "$shim/lib/"; done
          [ -e "$shim/lib/libnvrtc.so" ] || ln -s "$lib/libnvrtc.so.13" "$shim/lib/libnvrtc.so"
          ln -s "$inc" "$shim/include"
          echo "$shim"
          return 0
        fi
      done
    done
  done
  return 1
}

# Folders holding libcusparse / libcublas (cudarc opens them by name).
library_dirs() {
  local dirs=()
  local wheels
  wheels="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)"
  [ -n "$wheels" ] && [ -d "$wheels" ] && dirs+=("$wheels")
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  local IFS=:
  echo "${dirs[*]}"
}

if root="$(find_cuda_root)"; then
  export SPINDLE_CUDA_ROOT="$root"
  say "NVRTC: $(readlink -f "$root/lib")"
else
  say "no NVRTC 13 with CUDA headers found; set SPINDLE_CUDA_ROOT to a folder with lib/libnvrtc.so.13 and include/"
fi
export LD_LIBRARY_PATH="${SPINDLE_CUDA_ROOT:+$SPINDLE_CUDA_ROOT/lib:}$(library_dirs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$out/nvidia-smi.csv" 2>&1 || true
cat "$out/nvidia-smi.csv" >&2
cp "$here/COMMIT" "$out/COMMIT" 2>/dev/null || true

failed=()
run_stage() {
  local name="$1"
  shift
  say "$name: $*"
  local start=$SECONDS
  : > "$out/$name.log"
  if "$@" > >(tee -a "$out/$name.log") 2> >(tee -a "$out/$name.log" >&2); then
    say "$name: ok ($((SECONDS - start)) s)"
  else
    say "$name: FAILED ($((SECONDS - start)) s), see $out/$name.log"
    failed+=("$name")
  fi
}

# compute-sanitizer on ten kernels: memcheck on GroupCOO SpMM (f32, scatter
# by atomics), BlockGroupCOO SpMM (f16 on Tensor Cores), the
# gather-dot-scatter Einsum of Insum §5.2, the warp walk (map=walk; f32 at
# N = 64, two sub-warps), the row walk (map=rows on GroupCOO, f16 at N = 64,
# four sub-warps), block rows (map=rows, a cp.async ring), block rows
# sharing B (4 rows a block, block=512), Sgap's RB+PR (the level path,
# lanes over a CSR row's positions), RB+SR (the level path, each lane's
# columns of the row in registers, 40: a ragged second slot) and the warp walk under L2 policies
# (l2hints=on: B read and C stored by cache-hinted 16-byte PTX, f16 at
# N = 128, two sub-warps), and racecheck
# (shared-memory hazards between threads of a block) on the four that stage
# tiles in shared memory.
# Writes sanitizer.json, one entry per (tool, kernel).
sanitizer() {
  local cs
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
  if [ -z "$cs" ]; then
    echo '[{"kernel": "all", "ok": false, "log_tail": "compute-sanitizer not found"}]' > "$out/sanitizer.json"
    echo "compute-sanitizer not found"
    return 1
  fi
  "$spindle" convert gen:blocks:rows=256,cols=256,bm=32,bk=32,density=0.3,seed=5 --to coo --out "$work/blocks.mtx" >/dev/null || return 1
  local names=(groupcoo-spmm blockgroupcoo-spmm gather-dot-scatter warp-walk row-walk block-rows shared-block-rows rb-pr rb-sr walk-l2hints blockgroupcoo-spmm gather-dot-scatter block-rows shared-block-rows)
  local tools=(memcheck memcheck memcheck memcheck memcheck memcheck memcheck memcheck memcheck memcheck racecheck racecheck racecheck racecheck)
  local groupcoo="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x64:f32:1 --format A=groupcoo:dim=0,g=auto --target cuda --check --repeats 1"
  local blocks="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$work/blocks.mtx --shape A=256x256:f16 --rand B=256x64:f16:1 --shape C=256x64:f16 --format A=blockgroupcoo:bm=32,bk=32,dim=0,g=auto --schedule \"tile.p=1 tile.q=1 tile.bi=32 tile.bj=32 tile.n=64\" --target cuda --check --repeats 1"
  local gds="run \"C[D[y],x] += A[y,E[r]] * B[r,x]\" --rand A=64x512:f16:1 --rand B=256x64:f16:2 --rand D=64:i32:3:128 --rand E=256:i32:4:512 --shape C=128x64:f16 --target cuda --check --repeats 1"
  local walk="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x64:f32:1 --format A=groupcoo:dim=0,g=4 --schedule \"map=walk tile.p=8\" --target cuda --check --repeats 1"
  local rows="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$work/blocks.mtx --shape A=256x256:f16 --rand B=256x160:f16:1 --shape C=256x160:f16 --format A=blockgroupcoo:bm=32,bk=32,dim=0,g=auto --schedule \"map=rows tile.n=128\" --target cuda --check --repeats 1"
  local shared_rows="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$work/blocks.mtx --shape A=256x256:f16 --rand B=256x160:f16:1 --shape C=256x160:f16 --format A=blockgroupcoo:bm=32,bk=32,dim=0,g=auto --schedule \"map=rows tile.n=128 block=512\" --target cuda --check --repeats 1"
  local row_walk="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x64:f16:1 --shape C=2708x64:f16 --format A=groupcoo:dim=0,g=4 --schedule \"map=rows tile.p=8\" --target cuda --check --repeats 1"
  local rb_pr="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x64:f32:1 --format A=csr --schedule \"path=levels order=m+n+k reduce=parallel\" --target cuda --check --repeats 1"
  local rb_sr="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x40:f32:1 --format A=csr --schedule path=levels --target cuda --check --repeats 1"
  local walk_hints="run \"C[m,n] += A[m,k] * B[k,n]\" --tensor A=$SPINDLE_DATA/matrices/cora.mtx --rand B=2708x128:f16:1 --shape C=2708x128:f16 --format A=groupcoo:dim=0,g=8 --schedule \"map=walk tile.p=16 l2hints=on\" --target cuda --check --repeats 1"
  local cmds=("$groupcoo" "$blocks" "$gds" "$walk" "$row_walk" "$rows" "$shared_rows" "$rb_pr" "$rb_sr" "$walk_hints" "$blocks" "$gds" "$rows" "$shared_rows")
  local ok_all=0 i json="["
  for i in "${!names[@]}"; do
    local label="${tools[$i]} ${names[$i]}"
    local log="$work/sanitizer-${tools[$i]}-${names[$i]}.log"
    if eval "\"$cs\" --tool ${tools[$i]} --error-exitcode 3 \"$spindle\" ${cmds[$i]}" >"$log" 2>&1; then
      echo "$label: ok"
      ok=true
    else
      echo "$label: FAILED"
      ok=false
      ok_all=1
    fi
    tail -n 5 "$log"
    local tail_text
    tail_text="$(tail -n 8 "$log" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')"
    [ "$i" -gt 0 ] && json+=","
    json+="{\"kernel\": \"${names[$i]} (${tools[$i]})\", \"ok\": $ok, \"log_tail\": $tail_text}"
  done
  echo "$json]" > "$out/sanitizer.json"
  return $ok_all
}

# The plain command on a 100k-non-zero power-law SpMM (N = 128), f32 and f16:
# GroupCOO at the suite's tuned tiles and CSR as a user runs it (autotuned),
# each checked against the reference and timed; the quick look after a change
# to the CUDA printer or runtime. (At 1M non-zeros the reference evaluator's
# check alone ran past two minutes on the H100 machine.)
smoke() {
  local a="$work/powerlaw-100k.mtx" ok=0 t
  "$spindle" convert gen:powerlaw:rows=10000,cols=10000,nnz=100000,seed=1 --to coo --out "$a" >/dev/null || return 1
  for t in f32 f16; do
    "$spindle" run "C[m,n] += A[m,k] * B[k,n]" --tensor "A=$a" --shape "A=10000x10000:$t" \
      --rand "B=10000x128:$t:1" --shape "C=10000x128:$t" --format A=groupcoo:dim=0,g=4 \
      --schedule "tile.q=4 tile.p=16 tile.n=128" --target cuda --check || ok=1
    "$spindle" run "C[m,n] += A[m,k] * B[k,n]" --tensor "A=$a" --shape "A=10000x10000:$t" \
      --rand "B=10000x128:$t:1" --shape "C=10000x128:$t" --format A=csr --target cuda --check || ok=1
  done
  return $ok
}

# The bunny's submanifold convolution (Insum §6.4), its kernel map built by
# subsection iteration from the .xyz file (`--tensor Map=kernelmap:...`) and
# grouped by offset: `Out[MX[p,q],m] += In[MY[p,q],c] * W[MZ[p],c,m]` on
# Tensor Cores in f16 (FMA in f32). Checked against the reference evaluator
# at 16 channels (it walks every group, channel pair in f64), timed at 64,
# beside the same layer on this machine's CPU (the C backend, all cores).
pointcloud() {
  local map="kernelmap:$SPINDLE_DATA/pointclouds/bunny.xyz:voxel=0.05" ok=0 t c voxels
  local stmt="Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]"
  voxels="$("$spindle" stats "$map" | awk '$1 == "shape" {print $2}')"
  [ -n "$voxels" ] || return 1
  for t in f16 f32; do
    for c in 16 64; do
      local args=(--tensor "Map=$map" --rand "In=${voxels}x$c:$t:6" --rand "W=27x${c}x$c:$t:7"
        --shape "Out=${voxels}x$c:$t" --format Map=groupcoo:dim=2,g=auto)
      if [ "$c" = 16 ]; then
        "$spindle" run "$stmt" "${args[@]}" --target cuda --check --repeats 5 || ok=1
      else
        "$spindle" run "$stmt" "${args[@]}" --target cuda --repeats 50 || ok=1
        "$spindle" run "$stmt" "${args[@]}" --target c --repeats 10 || ok=1
      fi
    done
  done
  return $ok
}

# The level path and ReACT's program kernels (a warp per row) on ca-CondMat
# as a user runs them, each checked against the reference evaluator and
# timed (medians of 50): CSR SpMM on the level path (Sgap's RB+SR, each
# lane's columns summed in registers across the row) beside the plain
# command (autotuned); SpMV with lanes over a row's positions in groups of
# 32, 8 and 4 (RB+PR); SDDMM with its output in A's pattern; SDDMM into SpMM
# (K = N = 16 and 64) under fusion=trie (one kernel, S a register) and none
# (a kernel per statement). None of these has run on a GPU before.
levels() {
  local a="$SPINDLE_DATA/matrices/ca-CondMat.mtx" ok=0 r k
  [ -e "$a" ] || a="gen:powerlaw:rows=23133,cols=23133,nnz=186936,seed=1"
  local n=23133 run=("$spindle" run --target cuda --check --repeats 50)
  local spmm="C[m,n] += A[m,k] * B[k,n]"
  "${run[@]}" "$spmm" --tensor "A=$a" --rand "B=${n}x128:f32:1" --format A=csr --schedule path=levels || ok=1
  "${run[@]}" "$spmm" --tensor "A=$a" --rand "B=${n}x128:f32:1" --format A=csr || ok=1
  for r in "" "(8)" "(4)"; do
    "${run[@]}" "y[i] = A[i,j] * x[j]" --tensor "A=$a" --rand "x=$n:f32:1" --format A=csr \
      --schedule "path=levels reduce=parallel$r" || ok=1
  done
  "${run[@]}" "S[i,j] = A[i,j] * U[i,k] * V[j,k]" --tensor "A=$a" --format A=csr --format S=csr \
    --rand "U=${n}x32:f32:1" --rand "V=${n}x32:f32:2" || ok=1
  for k in 16 64; do
    for f in trie none; do
      "${run[@]}" "S[i,j] = A[i,j] * X[i,k] * Y[j,k]; Z[i,n] = S[i,j] * X[j,n]" --tensor "A=$a" \
        --format A=csr --rand "X=${n}x$k:f32:1" --rand "Y=${n}x$k:f32:2" --schedule "fusion=$f" || ok=1
    done
  done
  return $ok
}

has_torch() { python3 -c 'import torch, numpy; assert torch.cuda.is_available()' >/dev/null 2>&1; }

for stage in "${stages[@]}"; do
  case "$stage" in
    corpus) run_stage corpus "$corpus" --target cuda --json "$out/corpus.json" ;;
    sanitizer) run_stage sanitizer sanitizer ;;
    smoke) run_stage smoke smoke ;;
    pointcloud) run_stage pointcloud pointcloud ;;
    levels) run_stage levels levels ;;
    # SPINDLE_SPMM_ARGS / SPINDLE_BSR_ARGS: extra arguments of the suites
    # (`--precision f32`, `--matrix NAME`, `--repeats N`), to split a suite
    # over several short calls.
    spmm) run_stage spmm "$spindle" bench spmm --target cuda ${SPINDLE_SPMM_ARGS:-} --record "$out" ;;
    bsr) run_stage bsr "$spindle" bench bsr --target cuda ${SPINDLE_BSR_ARGS:-} --record "$out" ;;
    torch)
      if has_torch; then
        run_stage torch python3 "$here/torch_bench.py" --spindle "$spindle" --data "$SPINDLE_DATA" \
          --work "$work/torch" --out "$out/torch.json"
      else
        say "torch: skipped (python3 cannot import torch with CUDA)"
      fi
      ;;
    summary) run_stage summary python3 "$here/summary.py" "$out" ;;
    *) say "unknown stage $stage"; failed+=("$stage") ;;
  esac
done

if [ ${#failed[@]} -gt 0 ]; then
  say "failed stages: ${failed[*]}"
  exit 1
fi
say "all stages passed; results in $out"
