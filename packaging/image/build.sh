#!/usr/bin/env bash
# `make image`: build Muster's serving image without any image registry.
#
#   packaging/image/build.sh [IMAGE]       default IMAGE: localhost/muster:VERSION
#
# 1. A minimal Debian root filesystem (bookworm, Python 3.11) from Debian's own packages by
#    mmdebstrap, cached under ${XDG_CACHE_HOME:-~/.cache}/muster/image keyed by everything that
#    makes it (suite, mirror, package list, options, mmdebstrap's version): a rebuild reuses it.
# 2. `podman import` of it as the base image (kept, under the same key).
# 3. Muster's wheel and its serving dependencies (packaging/wheel.sh) installed offline into a
#    venv on that base (Containerfile.debian), non-root, nothing written at run time.
# Prints the image name and its size. Needs mmdebstrap, podman and runc (Debian packages).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/packaging/image
python=${PYTHON:-python3}
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
image=${1:-localhost/muster:$version}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/muster/image
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

missing=()
for tool in mmdebstrap podman runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
    echo "error: make image needs ${missing[*]}: apt-get install -y mmdebstrap podman buildah runc" >&2
    exit 1
fi

suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# `essential` (no apt, no init) plus Python and libstdc++ (the CEL evaluator's C++ core); no
# documentation, manual pages or translations but the copyright files, which the packages'
# licences ask to keep.
options=(
    --variant=essential --include=python3,python3-venv,ca-certificates,libstdc++6
    --dpkgopt=path-exclude=/usr/share/doc/*
    --dpkgopt=path-include=/usr/share/doc/*/copyright
    --dpkgopt=path-exclude=/usr/share/man/*
    --dpkgopt=path-exclude=/usr/share/info/*
    --dpkgopt=path-exclude=/usr/share/locale/*
    --dpkgopt=path-exclude=/usr/share/lintian/*
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/lib/apt/lists/* "$1"/var/log/*'
)
key=$(printf '%s\n' "$suite" "$mirror" "${options[@]}" "$(mmdebstrap --version)" \
      | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key.tar
base=localhost/muster-rootfs:$key

mkdir -p "$cache"
if [[ ! -f $rootfs ]]; then
    echo "image: making the Debian $suite root filesystem (mmdebstrap, about a minute)" >&2
    # The name must end in .tar: mmdebstrap picks its output format from it.
    mmdebstrap --quiet --format=tar "${options[@]}" "$suite" "$cache/partial-$key.tar" "$mirror"
    mv "$cache/partial-$key.tar" "$rootfs"
fi
if ! podman image exists "$base"; then
    echo "image: importing $rootfs as $base" >&2
    podman import --quiet "$rootfs" "$base" >/dev/null
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mapfile -t built < <(PYTHON=$python "$repo/packaging/wheel.sh" "$context/dist")
mkdir "$context/wheels"
cp --link "${built[1]}"/*.whl "$context/wheels/" 2>/dev/null || cp "${built[1]}"/*.whl "$context/wheels/"
cp "$here/Containerfile.debian" "$context/Containerfile"

echo "image: building $image on $base" >&2
digest=$(cd "$context" && sha256sum dist/*.whl wheels/*.whl | sha256sum | cut -c1-16)
podman build --quiet --pull=never --build-arg "BASE=$base" --build-arg "WHEELS_DIGEST=$digest" \
    --tag "$image" "$context" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "$image $((size / 1000000)) MB"
