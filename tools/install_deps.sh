#!/usr/bin/env bash
# Installs the Debian packages pstrain builds and runs with, only those missing.
# Idempotent; needs root (or sudo) when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev libcereal-dev doctest-dev libtomlplusplus-dev libcli11-dev zlib1g-dev libsodium-dev
  libdnnl-dev libopenblas-dev libgloo-dev
  # oneDNN's CMake package config calls find_package(OpenCL) whatever the
  # build; libdnnl-dev only recommends these, and we install without recommends.
  ocl-icd-opencl-dev opencl-c-headers
  python3 python3-matplotlib python3-numpy
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "pstrain: installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
