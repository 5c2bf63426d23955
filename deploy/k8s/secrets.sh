#!/usr/bin/env bash
# The Secrets and the ConfigMap the manifests here read, made from `trusty-memory keys`
# files, and applied (created, or replaced after a key rotation): nothing secret is ever
# written into a manifest. Usage:
#
#   deploy/k8s/secrets.sh [--print] KEYS
#
# KEYS holds one trusty-memory home per identity, each with the keys/ that
# `trusty-memory keys init` made (deploy/README.md, "Kubernetes"):
#   KEYS/broker/keys/server.key_secret     the daemon's identity  -> Secret trusty-memory-server
#   KEYS/broker/keys/server.key            its public key         -> ConfigMap trusty-memory
#   KEYS/broker/keys/clients/NAME.key      the clients allowed in -> Secret trusty-memory-clients
#   KEYS/broker/keys/client.key_secret     the broker's probes    -> Secret trusty-memory-probe
#   KEYS/palace-NAME/keys/client.key_secret  a palace's worker    -> Secret trusty-memory-palace-NAME
# --print writes the YAML to stdout instead of applying it (kubectl needs no cluster then).
set -euo pipefail

apply="kubectl apply -f -"
if [ "${1:-}" = "--print" ]; then
  apply="cat"
  shift
fi
[ $# -eq 1 ] || { echo "usage: $0 [--print] KEYS" >&2; exit 2; }
keys=$1
broker=$keys/broker/keys
for f in "$broker/server.key_secret" "$broker/server.key" "$broker/client.key_secret"; do
  [ -f "$f" ] || { echo "$0: $f is missing: run TRUSTY_MEMORY_HOME=$keys/broker trusty-memory keys init" >&2; exit 1; }
done

public_key() {  # the Z85 public key of a pyzmq certificate file
  sed -n 's/^[[:space:]]*public-key = "\(.*\)"[[:space:]]*$/\1/p' "$1"
}
allowed() {  # whether a public key is among the broker's allowed clients
  for allowed_key in "$broker"/clients/*.key; do
    [ -f "$allowed_key" ] && [ "$(public_key "$allowed_key")" = "$1" ] && return 0
  done
  return 1
}
secret() {  # NAME --from-file=... : one Secret, as YAML, for kubectl apply
  local secret_name=$1
  shift
  kubectl create secret generic "$secret_name" "$@" --dry-run=client -o yaml
  echo ---
}

{
  secret trusty-memory-server --from-file=server.key_secret="$broker/server.key_secret"
  secret trusty-memory-clients --from-file="$broker/clients/"
  secret trusty-memory-probe --from-file=client.key_secret="$broker/client.key_secret"
  allowed "$(public_key "$broker/client.key_secret")" \
    || echo "$0: warning: the probes' key is not allowed in: trusty-memory keys add probe \"\$(trusty-memory keys show --client)\" (with TRUSTY_MEMORY_HOME=$keys/broker)" >&2
  for home in "$keys"/palace-*; do
    [ -f "$home/keys/client.key_secret" ] || continue
    name=${home##*/}
    secret "trusty-memory-$name" --from-file=client.key_secret="$home/keys/client.key_secret"
    allowed "$(public_key "$home/keys/client.key_secret")" \
      || echo "$0: warning: $name's key is not allowed in: trusty-memory keys add $name \"\$(TRUSTY_MEMORY_HOME=$home trusty-memory keys show --client)\" (with TRUSTY_MEMORY_HOME=$keys/broker)" >&2
  done
  kubectl create configmap trusty-memory \
    --from-literal=TRUSTY_MEMORY_SERVER_KEY="$(public_key "$broker/server.key")" \
    --dry-run=client -o yaml
} | $apply
