#!/usr/bin/env bash
# Packs a CUDA build made on this machine into .gpu-bin/ (git-ignored) so a GPU machine without
# the Debian packages can run it: bench/run_cuda.sh uses it (MPX_PREBUILT=.gpu-bin) when it loads
# there, and builds from the sources when it does not. Configure the build portable, for sm_90
# and without the engines the GPU machine lacks:
#   cmake -S . -B build-h -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
#     -DMPX_NATIVE=OFF -DMPX_ONEDNN=OFF -DMPX_DISTRIBUTED=OFF
# Usage: bench/pack_gpu_build.sh [build-dir]
set -euo pipefail
build=${1:-build-h}
root=$(git rev-parse --show-toplevel)
cd "$root"
out=.gpu-bin
rm -rf $out
mkdir -p $out/lib $out/tests $out/bench $out/tools
# libmpx loads its CUDA module from its own folder.
cp -L "$build"/libmpx.so.0 "$build"/libmpx_cuda.so $out/lib/
# The libraries the GPU machine's image lacks (JPEG decoders, OpenMP); CUDA's, cuDNN's and the C
# runtime are that machine's own.
ldd "$build"/libmpx.so.0 "$build"/libmpx_cuda.so | awk '/turbojpeg|libjpeg|nvjpeg|libgomp/ {print $3}' | sort -u |
  xargs -r cp -L -t $out/lib/
for t in $(grep -l '\[cuda\]' tests/test_*.cpp | xargs -n1 basename | sed 's/\.cpp$//'); do
  [ -x "$build/tests/$t" ] && cp "$build/tests/$t" $out/tests/
done
for b in "$build"/bench/bench_*_cuda "$build"/bench/bench_loader; do [ -x "$b" ] && cp "$b" $out/bench/; done
cp "$build"/tools/mpx $out/tools/
strip --strip-unneeded $out/lib/libmpx.so.0 $out/lib/libmpx_cuda.so $out/tests/* $out/bench/* $out/tools/mpx
# Tests read their data through the source path compiled into them: run_cuda.sh links it there.
echo "$root" >$out/source-dir
git rev-parse --short HEAD >$out/commit
git diff --quiet HEAD || echo "(with uncommitted changes)" >>$out/commit
du -sh $out
