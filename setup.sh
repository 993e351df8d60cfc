#!/usr/bin/env bash
# One-time set-up from a fresh clone: Debian toolchain packages, then edgepack with its Python deps.
set -euo pipefail
cd "$(dirname "$0")"

# C toolchains and stand-in boards (docs/tvm-facts.md#debian-packages): host gcc/make/size; Arm Linux cross
# compilers, qemu-user and sshd for the stand-in Pi; arm-none-eabi and qemu-system-arm for the Cortex-M
# stand-ins; chromium renders the HTML report in its test; debootstrap builds the cached arm64 root file system
# for on-board RPC.
APT_PACKAGES=(gcc make binutils file
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross qemu-user openssh-server debootstrap
  gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
  chromium)

if command -v apt-get >/dev/null 2>&1; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
echo "edgepack is set up: try 'edgepack build'"
