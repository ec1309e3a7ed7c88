#!/usr/bin/env bash
# Installs the Debian bookworm packages enginery builds with, when some are missing. Needs root (or sudo) only
# when something is missing. torch, pytest and the build backend come from PyPI into the project venv
# (requirements.txt, the Makefile); Gloo's headers, which PyPI's torch does not ship, come from here.
set -euo pipefail
packages=(libgloo-dev libtomlplusplus-dev libboost-dev nlohmann-json3-dev libgtest-dev libcli11-dev libssl-dev
          cmake ninja-build g++ ccache make
          python3 python3-dev python3-venv)  # the venv, and Python.h for the module (python/)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
