#!/bin/sh
# Certificates for the extender's mutual TLS (docs/install.md, "Certificates"): a CA, Muster's
# serving certificate and kube-scheduler's client certificate, both signed by that CA.
#
#   manifests/tls/make-certs.sh DIR [EXTRA_SAN...]
#
# writes DIR/ca.crt, DIR/muster.crt + muster.key (DNS names of the muster Service, plus each
# EXTRA_SAN: DNS:name or IP:address) and DIR/scheduler.crt + scheduler.key (clientAuth only).
# The CA key (DIR/ca.key) signs nothing else: keep it offline, or delete it and rerun the
# script to rotate everything. Certificates last DAYS days (default 365).
set -eu

dir=${1:?usage: make-certs.sh DIR [EXTRA_SAN...]}
shift
namespace=${NAMESPACE:-muster-system}
days=${DAYS:-365}
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=muster-extender-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.crt

sans="DNS:muster,DNS:muster.$namespace,DNS:muster.$namespace.svc"
sans="$sans,DNS:muster.$namespace.svc.cluster.local"
for extra in "$@"; do sans="$sans,$extra"; done

sign() {  # name, subject, extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days "$days" -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

sign muster "/CN=muster.$namespace.svc" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$sans"
sign scheduler "/CN=muster-kube-scheduler" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.srl
chmod 600 ./*.key
