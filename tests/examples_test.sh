#!/bin/sh
# examples/ built as a user would, against the installed library: `meson install` into a
# temporary root, each example's Makefile with nothing but pkg-config's flags (the examples
# are copied out of the source tree, so no header can come from it), then run briefly: the
# custom layer trains, the data-parallel program's replicas end identical under mpiexec.
#
# usage: examples_test.sh BUILD_DIR SOURCE_DIR MPIEXEC
set -eu
build=$1 src=$2 mpiexec=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet
pc=$(find "$tmp/root" -name ringflow.pc)
[ -n "$pc" ] || { echo "examples: no ringflow.pc installed"; exit 1; }
# The installed root moved under $tmp: point ringflow's .pc files there (MPICH's and the
# others' stay as the system has them).
prefix=$(sed -n 's/^prefix=//p' "$pc")
sed -i "s|^prefix=.*|prefix=$tmp/root$prefix|" "$(dirname "$pc")"/ringflow*.pc
export PKG_CONFIG_PATH="$(dirname "$pc")"
echo "examples: pkg-config --cflags ringflow-models ringflow-comm: $(pkg-config --cflags ringflow-models ringflow-comm)"

# Every header an installed header includes is installed too.
include=$(pkg-config --variable=includedir ringflow)
missing=0
for header in $(cd "$include" && find ringflow -name '*.h'); do
  for wanted in $(sed -n 's/^#include "\(ringflow\/[^"]*\)".*/\1/p' "$include/$header"); do
    [ -f "$include/$wanted" ] || { echo "examples: $header includes $wanted, not installed"; missing=1; }
  done
done
[ "$missing" -eq 0 ]

# A library built with the sanitizers (./dev test --sanitize) wants programs built with them.
cxxflags=-O2
for lib in "$(dirname "$(dirname "$pc")")"/libringflow*.so; do
  ldd "$lib" 2>/dev/null | grep -q libasan && cxxflags="-O2 -fsanitize=address,undefined"
done
for example in custom_layer data_parallel; do
  cp -r "$src/examples/$example" "$tmp/$example"
  make -s -C "$tmp/$example" CXXFLAGS="$cxxflags"
done

export LD_LIBRARY_PATH="$(dirname "$(dirname "$pc")")" OMP_NUM_THREADS=1
"$tmp/custom_layer/custom_layer" 100 > "$tmp/custom_layer.out"
cat "$tmp/custom_layer.out"
grep -q '^test accuracy' "$tmp/custom_layer.out"
"$mpiexec" -n 2 "$tmp/data_parallel/data_parallel" 20 > "$tmp/data_parallel.out"
cat "$tmp/data_parallel.out"
grep -q 'replicas identical' "$tmp/data_parallel.out"
echo "examples: built against the installed library and ran"
