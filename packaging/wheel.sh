#!/usr/bin/env bash
# Build Muster's wheel into OUTDIR and make sure a wheelhouse holds every wheel a serving
# install needs (no extras: no numpy, matplotlib or Ray) and the build backend.
#
#   packaging/wheel.sh OUTDIR        prints two lines: the wheel's path, the wheelhouse's
#
# The wheelhouse is cached under ${XDG_CACHE_HOME:-~/.cache}/muster/wheelhouse/KEY, KEY a hash
# of pyproject.toml's dependencies and build requirements and of the Python version: the first
# run downloads from PyPI, later ones (the wheel test, `make image`) build and install offline.
# PYTHON (default python3) is the interpreter whose pip builds and whose version the wheels fit.
set -euo pipefail

out=${1:?usage: packaging/wheel.sh OUTDIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}

key=$("$python" - "$here/pyproject.toml" <<'PY'
import hashlib, sys, tomllib
data = tomllib.load(open(sys.argv[1], "rb"))
inputs = [*data["project"]["dependencies"], *data["build-system"]["requires"], sys.version]
print(hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16])
PY
)
house=${XDG_CACHE_HOME:-$HOME/.cache}/muster/wheelhouse/$key
mkdir -p "$out"
pip=("$python" -m pip --disable-pip-version-check --quiet)

if [[ ! -f $house/.complete ]]; then
    echo "wheelhouse: filling $house from PyPI (once per set of dependencies)" >&2
    rm -rf "$house.tmp" && mkdir -p "$house.tmp"
    requires=$("$python" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$here/pyproject.toml")
    mapfile -t build_requires <<<"$requires"
    "${pip[@]}" wheel --wheel-dir "$house.tmp" "${build_requires[@]}"
    "${pip[@]}" wheel --wheel-dir "$house.tmp" "$here"
    rm -f "$house.tmp"/muster-*.whl  # the code changes every build; only its dependencies stay
    touch "$house.tmp/.complete"
    rm -rf "$house" && mv "$house.tmp" "$house"
fi

rm -f "$out"/muster-*.whl
# Offline from here: the build backend comes from the wheelhouse, in pip's isolated build env.
"${pip[@]}" wheel --no-deps --no-index --find-links "$house" --wheel-dir "$out" "$here"
ls "$out"/muster-*.whl
echo "$house"
