#!/usr/bin/env bash
# Install what `make image` and the image tests need, from Debian's packages, when it is
# missing: mmdebstrap (a minimal root filesystem), podman (import and run it) and runc (the
# runtime podman can use here; see docs/install.md). Needs root and apt-get; elsewhere it
# says what to install and the image tests skip with the same hint.
set -euo pipefail
tools=(mmdebstrap podman runc)
missing=()
for t in "${tools[@]}"; do
  command -v "$t" >/dev/null 2>&1 || [[ -x "/usr/sbin/$t" ]] || missing+=("$t")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[image-tools] missing ${missing[*]}: apt-get install -y ${tools[*]} (as root)" >&2
  exit 0
fi
echo "[image-tools] installing ${missing[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${tools[@]}" >/dev/null \
  || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${tools[@]}" >/dev/null; }
