#!/bin/sh
# The installation, used as a user would: `meson install` into a scratch root (the installed
# tree may move: its rpaths are relative, its .pc and CMake files find the prefix from where
# they lie), with LD_LIBRARY_PATH unset throughout, then
# - the libraries carry versioned sonames; every installed header compiles alone against the
#   prefix (so whatever it includes is installed, or comes from a dependency the package
#   files name);
# - the installed ringflow-* programs start, and ringflow-train trains a few iterations on
#   Fashion-MNIST;
# - the CMake package's version file accepts this version and refuses the next minor one;
# - each example in examples/ (copied out of the source tree, so no header can come from it)
#   is built with its Makefile (pkg-config) and with its CMakeLists.txt (find_package), and
#   each build runs briefly: the custom layer trains, the data-parallel program's replicas
#   end identical under mpiexec.
#
# usage: examples_test.sh BUILD_DIR SOURCE_DIR MPIEXEC PREFIX
set -eu
build=$1 src=$2 mpiexec=$3 prefix=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH
export OMP_NUM_THREADS=1

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root"
P=$tmp/root$prefix
pc=$(find "$P" -name ringflow.pc)
[ -n "$pc" ] || { echo "examples: no ringflow.pc installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
# A build folder configured before .pc files were relocatable names its prefix absolutely:
# point that at the scratch root (MPICH's and the others' .pc files stay as the system has them).
sed -i "s|^prefix=/.*|prefix=$P|" "$(dirname "$pc")"/ringflow*.pc
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
echo "examples: pkg-config --cflags ringflow-models ringflow-comm: $(pkg-config --cflags ringflow-models ringflow-comm)"

for lib in kernels framework comm models; do
  soname=$(readelf -d "$libdir/libringflow_$lib.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  case $soname in
    "libringflow_$lib.so."[0-9]*) [ -e "$libdir/$soname" ] ;;
    *) echo "examples: libringflow_$lib.so has soname '$soname', not a versioned one"; exit 1 ;;
  esac
done

# Every installed header compiles alone with the installed package's flags (in parallel:
# they are a hundred).
include=$(pkg-config --variable=includedir ringflow)
cflags=$(pkg-config --cflags ringflow-models ringflow-comm)
(cd "$include" && find ringflow -name '*.h' | sort) > "$tmp/headers"
# shellcheck disable=SC2016  # $1 (the flags) and $2 (the header) belong to the inner sh
xargs -n 1 -P "$(nproc)" sh -c 'out=$(echo "#include \"$2\"" | c++ -std=c++20 -fsyntax-only $1 -x c++ - 2>&1) ||
  { printf "examples: %s does not compile alone against the installed prefix:\n%s\n" "$2" "$(echo "$out" | head -5)"; exit 1; }' \
  check_header "$cflags" < "$tmp/headers"
echo "examples: the $(wc -l < "$tmp/headers") installed headers compile alone"

for program in ringflow-bench-kernels ringflow-bench-step-memory ringflow-bench-collectives; do
  "$P/bin/$program" --help > /dev/null
done
"$P/bin/ringflow-train" --epochs 1 --max-iters 3 --eval-every 0 --metrics "$tmp/train.jsonl" > "$tmp/train.out"
grep -q '"type":"epoch"' "$tmp/train.jsonl" ||
  { cat "$tmp/train.out"; echo "examples: the installed ringflow-train wrote no epoch record"; exit 1; }
echo "examples: $P/bin/ringflow-train trained on Fashion-MNIST"

# find_package(ringflow VERSION) accepts this version and refuses the next minor one.
version=$(pkg-config --modversion ringflow)
major=${version%%.*} minor=${version#*.}
next=$major.$((${minor%%.*} + 1))
mkdir "$tmp/version"
for wanted in "$version" "$next"; do
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(v NONE)\nfind_package(ringflow %s REQUIRED)\n' \
    "$wanted" > "$tmp/version/CMakeLists.txt"
  cmake -S "$tmp/version" -B "$tmp/version/build-$wanted" -Dringflow_DIR="$libdir/cmake/ringflow" \
    > "$tmp/cmake-$wanted.log" 2>&1 || true
done
grep -q 'Configuring done' "$tmp/cmake-$version.log" || { cat "$tmp/cmake-$version.log"; exit 1; }
grep -q 'considered but not accepted' "$tmp/cmake-$next.log" ||
  { cat "$tmp/cmake-$next.log"; echo "examples: find_package(ringflow $next) accepted $version"; exit 1; }

# A library built with the sanitizers (./dev test --sanitize) wants programs built with them.
sanitize=
for lib in "$libdir"/libringflow*.so; do
  ldd "$lib" 2>/dev/null | grep -q libasan && sanitize="-fsanitize=address,undefined"
done
for example in custom_layer data_parallel; do
  cp -r "$src/examples/$example" "$tmp/$example"
  make -s -C "$tmp/$example" CXXFLAGS="-O2 $sanitize"
  if ! { cmake -S "$tmp/$example" -B "$tmp/$example/build" -DCMAKE_PREFIX_PATH="$P" \
           -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$sanitize" &&
         cmake --build "$tmp/$example/build"; } > "$tmp/cmake.log" 2>&1; then
    cat "$tmp/cmake.log"
    echo "examples: $example does not build with CMake against $P"
    exit 1
  fi
done

# The Makefile builds train longer; the CMake builds show that they link and run.
custom_layer() {
  "$tmp/custom_layer/$1" "$2" > "$tmp/custom_layer.out"
  cat "$tmp/custom_layer.out"
  grep -q '^test accuracy' "$tmp/custom_layer.out"
}
data_parallel() {
  "$mpiexec" -n 2 "$tmp/data_parallel/$1" "$2" > "$tmp/data_parallel.out"
  cat "$tmp/data_parallel.out"
  grep -q 'replicas identical' "$tmp/data_parallel.out"
}
custom_layer custom_layer 100
custom_layer build/custom_layer 10
data_parallel data_parallel 20
data_parallel build/data_parallel 5
echo "examples: built with pkg-config and with CMake against the installed library, and ran"
