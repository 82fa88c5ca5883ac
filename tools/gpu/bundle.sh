#!/usr/bin/env bash
# Assembles .gpubin/ (git-ignored): what a lent GPU machine lacks to build and
# test spill, taken from this Debian machine. That machine (Ubuntu 24.04, no
# network) has nvcc, gcc, make, mpicc and a python3 with CUDA PyTorch on PATH,
# but no liburing, OpenBLAS, GLPK or bible-kjv, and its /usr/bin/python3 has
# no numpy. Carry it with the device tool's run: carry [".gpubin"], then
# `bash tools/gpu/check.sh` there (see docs/device.md).
set -eu
cd "$(dirname "$0")/../.."
B=.gpubin
L=/usr/lib/x86_64-linux-gnu
rm -rf "$B"
mkdir -p "$B/root/include" "$B/root/lib" "$B/bin"
cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/glpk.h "$B/root/include/"
cp /usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$B/root/include/"
for f in liburing.so.2 libglpk.so.40 libcolamd.so.2 libamd.so.2 libltdl.so.7 \
	libsuitesparseconfig.so.5 libgfortran.so.5 libquadmath.so.0 libopenblas.so.0; do
	cp -L "$L/$f" "$B/root/lib/"
done
ln -s liburing.so.2 "$B/root/lib/liburing.so"
ln -s libglpk.so.40 "$B/root/lib/libglpk.so"
ln -s libopenblas.so.0 "$B/root/lib/libopenblas.so"
# the default corpus, and a stand-in `bible` that prints it
bible -l 79 Gen1:1-Rev22:21 >"$B/kjv.txt"
printf '#!/bin/sh\n# stands in for bible-kjv: prints `bible -l 79 Gen1:1-Rev22:21`\nexec cat "$(dirname "$0")/../kjv.txt"\n' >"$B/bin/bible"
chmod +x "$B/bin/bible"
du -sh "$B"
