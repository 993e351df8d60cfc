#!/usr/bin/env bash
# One-time set-up from a fresh clone: Debian toolchain packages, then edgepack with its Python deps.
set -euo pipefail
cd "$(dirname "$0")"

# C toolchain for building packages on the host board (make, gcc, binutils' size).
APT_PACKAGES=(gcc make binutils)

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
