#!/bin/sh
# Installs every Debian package tether's build, tests and main job need.
# Idempotent: installs only what is missing; uses sudo only when not root.
# Usage: deploy/install-deps.sh [--with-torch]   (torch: benchmark anchors)
set -eu

PKGS="build-essential cmake pkg-config git libzmq3-dev libprotobuf-c-dev protobuf-c-compiler
libuv1-dev libcunit1-dev zlib1g-dev libopenblas-dev dataset-fashion-mnist
clang libclang-rt-14-dev clang-format cppcheck python3 procps"
if [ "${1:-}" = "--with-torch" ]; then
    PKGS="$PKGS python3-torch python3-numpy"
fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "install-deps: installing:$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
