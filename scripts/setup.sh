#!/usr/bin/env bash
# setup.sh — installs the Debian packages tcl builds and tests with, when they are missing.
# Quiet and quick when everything is there: it only asks dpkg. When something is missing it
# says what, runs `apt-get update` once, and installs it (through sudo when not root).
# Written for Debian 12; on a system without dpkg it prints the list and leaves it to you.
set -euo pipefail

# make and libc6-dev are listed because gcc and cmake only recommend them, and
# we install without recommends. dataset-fashion-mnist is the data set tcl.data.fashion_mnist
# reads (and its spec checks); luarocks builds tcl-scm-1.rockspec (spec/project/packaging_spec.lua);
# clang checks the Metal kernels tcl renders (C++ against a stand-in header); g++ builds the
# rendered CUDA/Metal sources as host C++ to compare their values with EMU's. python3-torch gives
# the specs their PyTorch reference values (spec/support/torch_ref.lua) and exports the ONNX models
# the benchmarks import; libonnx-testdata is ONNX's conformance suite the test command runs,
# libonnx-dev its onnx.proto (the ONNX reader's field numbers are checked against it), and
# python3-onnx an independent reader of the same files. libopenmpi-dev gives tcl.distributed's MPI
# backend Open MPI's mpi.h (libmpi itself is loaded at run time), openmpi-bin the mpirun that
# launches the 2-rank jobs the specs and the all-reduce benchmark run.
PACKAGES=(cmake make gcc libc6-dev pkg-config liblua5.4-dev lua5.4 lua-busted lua-check
          libxxhash-dev libffi-dev libreadline-dev zlib1g-dev dataset-fashion-mnist luarocks
          clang g++ python3-torch python3-onnx libonnx-testdata libonnx-dev
          libopenmpi-dev openmpi-bin)
# LLVM's C API: any of these satisfies the build (cmake/Dependencies.cmake takes the newest).
LLVM_PACKAGES=(llvm-19-dev llvm-18-dev llvm-17-dev llvm-16-dev llvm-15-dev)

installed() {
  # `dpkg -s` also succeeds for removed packages whose config files remain, so read the
  # status. (Not `dpkg -s | grep -q`: with pipefail, grep quitting early can make dpkg die
  # of SIGPIPE and a present package look missing.)
  local info
  info=$(dpkg -s "$1" 2>/dev/null) || return 1
  grep -qx 'Status: install ok installed' <<<"$info"
}

if ! command -v dpkg >/dev/null 2>&1; then
  echo "setup: no dpkg here (not Debian?); make sure these are installed: ${PACKAGES[*]} llvm-19-dev (LLVM 15 or newer)" >&2
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
need_llvm=1
for p in "${LLVM_PACKAGES[@]}"; do
  if installed "$p"; then need_llvm=0; break; fi
done

if [ ${#missing[@]} -eq 0 ] && [ $need_llvm -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  all=("${missing[@]}")
  [ $need_llvm -eq 1 ] && all+=(llvm-19-dev)
  echo "setup: missing packages, and neither root nor sudo is available to install them." >&2
  echo "setup: as root, run:  apt-get install ${all[*]}" >&2
  exit 1
fi

echo "setup: updating the package lists"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq

if [ $need_llvm -eq 1 ]; then
  # the newest LLVM Debian offers (better code for this CPU); 15 is the oldest
  # that has what the CPU device uses.
  llvm_choice=""
  for p in "${LLVM_PACKAGES[@]}"; do
    if apt-cache show "$p" >/dev/null 2>&1; then llvm_choice=$p; break; fi
  done
  [ -n "$llvm_choice" ] || { echo "setup: no LLVM 15 or newer in the package lists (${LLVM_PACKAGES[*]})" >&2; exit 1; }
  missing+=("$llvm_choice")
fi

echo "setup: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
