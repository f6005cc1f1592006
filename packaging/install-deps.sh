#!/usr/bin/env bash
# Installs, with apt, only the Debian 12 packages that cwb needs and that are missing. Idempotent.
# Usage: packaging/install-deps.sh [--no-gui]
set -euo pipefail

# OpenBLAS replaces the reference BLAS that libtorch-dev pulls in (matrix products run many times faster).
packages=(build-essential cmake pkg-config ccache libtorch-dev libopenblas0-pthread libsqlite3-dev nlohmann-json3-dev)
if [[ "${1:-}" != "--no-gui" ]]; then
    packages+=(qt6-base-dev libqcustomplot-dev xvfb xauth)
fi

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
