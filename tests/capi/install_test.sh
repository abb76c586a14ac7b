#!/bin/bash
# make install into a temporary prefix, then as a user of the package would:
# - the examples built out of the tree with pkg-config (shared library) and
#   with find_package(rotor) (shared and static), run and checked;
# - the installed `rotor` run from another directory with no -m, using the
#   installed model (seen in its memory map), and a moved prefix still works.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log" || fail "cmake --install"
libdir=$(dirname "$(find "$prefix" -name rotor.pc -path '*pkgconfig*' | head -1)")/..
libdir=$(cd "$libdir" && pwd)
for f in "$libdir/librotor.a" "$libdir/pkgconfig/rotor.pc" "$libdir/cmake/rotor/rotorConfig.cmake" \
         "$prefix/include/rotor/rotor.h" "$prefix/bin/rotor" \
         "$prefix/share/rotor/models/stories260K.gguf"; do
  [ -f "$f" ] || fail "not installed: $f"
done
ls "$libdir"/librotor.so.* > /dev/null || fail "no librotor.so"
# The shared library exports the C API and nothing else.
if nm -D --defined-only "$libdir/librotor.so" | awk '{print $3}' | grep -v '^rotor_' | grep -q .; then
  nm -D --defined-only "$libdir/librotor.so" | awk '{print $3}' | grep -v '^rotor_' | head >&2
  fail "librotor.so exports symbols other than rotor_*"
fi

model=$prefix/share/rotor/models/stories260K.gguf
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"

# pkg-config, shared library.
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -std=c99 -Wall -Wextra -Werror -o simple "$src/examples/simple.c" \
  $(pkg-config --cflags --libs rotor) || fail "simple.c through pkg-config"
LD_LIBRARY_PATH=$libdir ./simple "$model" "Once upon a time" 40 > simple.out 2> simple.err ||
  fail "simple: $(cat simple.err)"
[ ! -s simple.err ] || fail "simple wrote to stderr: $(cat simple.err)"

# The installed binary from another directory, no -m: the same greedy text.
"$prefix/bin/rotor" generate -p "Once upon a time" -n 40 --temp 0 > generate.out 2> generate.err ||
  fail "installed rotor generate without -m: $(cat generate.err)"
cmp simple.out generate.out || fail "simple and rotor generate differ:
$(cat simple.out)
$(cat generate.out)"
grep -q "^Once upon a time, there was a little girl named Lily" simple.out ||
  fail "unexpected text: $(cat simple.out)"
# ... and it maps the installed model, not the source tree's.
mkfifo chat.in
"$prefix/bin/rotor" chat < chat.in > chat.out 2>&1 &
pid=$!
exec 3> chat.in  # chat waits for a line while we look
for _ in $(seq 1 100); do
  grep -q stories260K.gguf "/proc/$pid/maps" 2> /dev/null && break
  sleep 0.1
done
mapped=$(grep -o '/[^ ]*stories260K.gguf' "/proc/$pid/maps" 2> /dev/null | head -1 || true)
exec 3>&-
kill "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
[ -n "$mapped" ] || fail "rotor chat mapped no model: $(cat chat.out)"
[ "$(realpath "$mapped")" = "$(realpath "$model")" ] || fail "rotor mapped $mapped, not $model"

# find_package(rotor): shared (simple, batched) and static (stream_sink).
cmake -S "$src/examples" -B ex -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > ex-configure.log 2>&1 || fail "find_package(rotor): $(tail -20 ex-configure.log)"
cmake --build ex -j 2 > ex-build.log 2>&1 || fail "examples build: $(tail -20 ex-build.log)"
./ex/simple "$model" "Once upon a time" 40 > simple2.out || fail "simple (find_package)"
cmp simple.out simple2.out || fail "simple through find_package differs"
./ex/batched "$model" 40 > batched.out 2> batched.err || fail "batched: $(cat batched.err)"
[ "$(grep -c '^\[' batched.out)" = 3 ] || fail "batched: $(cat batched.out)"
for p in '\[full\] Once upon a time' '\[sink\] The little dog' '\[window\] Lily wanted to'; do
  grep -q "^$p" batched.out || fail "batched: no line '$p': $(cat batched.out)"
done
ldd ./ex/stream_sink | grep -q librotor && fail "stream_sink should link librotor.a statically"
./ex/stream_sink "$model" 4096 > sink.out 2> sink.err || fail "stream_sink: $(cat sink.err)"
[ "$(grep -c 'kv bytes' sink.err)" = 4 ] || fail "stream_sink reports: $(cat sink.err)"
[ "$(grep -o 'kv bytes [0-9]*' sink.err | sort -u | wc -l)" = 1 ] ||
  fail "stream_sink memory not flat: $(cat sink.err)"
[ "$(wc -c < sink.out)" -gt 8000 ] || fail "stream_sink wrote $(wc -c < sink.out) bytes"

# A moved prefix still works (rotor.pc and rotorConfig.cmake are relocatable).
mv "$prefix" "$work/moved"
PKG_CONFIG_PATH=${libdir/$prefix/$work/moved}/pkgconfig
export PKG_CONFIG_PATH
cc -std=c99 -o simple3 "$src/examples/simple.c" $(pkg-config --cflags --libs rotor) ||
  fail "pkg-config after moving the prefix"
LD_LIBRARY_PATH=${libdir/$prefix/$work/moved} ./simple3 \
  "$work/moved/share/rotor/models/stories260K.gguf" "Once upon a time" 40 > simple3.out
cmp simple.out simple3.out || fail "moved prefix: different text"
"$work/moved/bin/rotor" generate -p "Once upon a time" -n 40 --temp 0 > generate3.out 2> /dev/null
cmp simple.out generate3.out || fail "moved prefix: rotor generate differs"
echo "install_test: ok ($(cat simple.out | head -c 60)...)"
