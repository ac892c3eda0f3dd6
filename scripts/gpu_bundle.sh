#!/usr/bin/env bash
# gpu_bundle.sh — packs into .gpu/ what a GPU machine that has the NVIDIA driver and a CUDA
# toolkit but neither Lua, LLVM nor busted needs to run tcl's CUDA checks
# (scripts/gpu_check.sh): a build of tcl (default build-rel, built here first), the lua5.4
# interpreter, busted and the Lua modules it uses, and every shared library those programs
# load that is not the C library or CUDA's own (compressed: LLVM is most of it).
#
#   scripts/gpu_bundle.sh [BUILD_DIR]      then carry .gpu to the GPU machine
#
# The bundle is for an x86-64 Linux with a C library at least as new as this machine's.
# .gpu/ is listed in .git/info/exclude (this script adds it), never committed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build-rel}
out=.gpu

grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >>.git/info/exclude; }

echo "gpu_bundle: building $build (Release)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target tcl tcl_lua_module tcl_mock_cuda gpu_baselines >/dev/null

rm -rf "$out"
mkdir -p "$out/bin" "$out/lua/share" "$out/lua/lib" "$out/build/lua" "$out/build/bench" "$out/build/tests"
cp "$build/tcl" "$out/build/"
cp "$build/lua/tcl.so" "$out/build/lua/"
cp "$build/CMakeCache.txt" "$out/build/" # specs read the build type from it
cp "$build/bench/gpu_baselines" "$out/build/bench/"
[ -e "$build/tests/libmock_cuda.so" ] && cp "$build/tests/libmock_cuda.so" "$out/build/tests/"

lua_bin=$(readlink -f "$(command -v lua5.4)")
cp "$lua_bin" "$out/bin/lua5.4"
cp "$(command -v busted)" "$out/bin/busted"
# busted and its modules (pure Lua, and a few C modules: luasystem, lua-term, lfs)
for d in /usr/share/lua/5.4/*; do
  case $(basename "$d") in luarocks | ssl | ssl.lua) ;; *) cp -rL "$d" "$out/lua/share/" ;; esac
done
for d in /usr/lib/x86_64-linux-gnu/lua/5.4/*; do
  case $(basename "$d") in ssl.so | socket | mime) ;; *) cp -rL "$d" "$out/lua/lib/" ;; esac
done

# shared libraries: everything ldd names but the C library and the CUDA libraries (the
# GPU machine's own driver and toolkit must be used)
libs=$(mktemp -d)
objects=("$out/build/tcl" "$out/build/lua/tcl.so" "$out/bin/lua5.4")
while IFS= read -r so; do objects+=("$so"); done < <(find "$out/lua/lib" -name '*.so')
for o in "${objects[@]}"; do
  ldd "$o" | awk '/=> \//{print $3}'
done | sort -u | while IFS= read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda* | libcublas* | libnvrtc*) ;;
    *) cp -L "$lib" "$libs/" ;;
  esac
done
echo "gpu_bundle: compressing $(du -sh "$libs" | cut -f1) of shared libraries"
tar cf - -C "$libs" . | xz -T0 -6 >"$out/libs.tar.xz"
rm -rf "$libs"
echo "gpu_bundle: $(du -sh "$out" | cut -f1) in $out/"
