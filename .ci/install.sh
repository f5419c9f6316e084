#!/usr/bin/env bash
# Install what floodgate's tests and CI need on a Debian machine. Idempotent:
# apt-get runs (with one `apt-get update`) only when a package is missing, and
# cargo-fuzz is built only when `cargo fuzz` is not already available.
#
#   swaks, python3 (with ssl), openssl : clients and certificates for tests/proxy_*.rs
#   libnet-ssleay-perl, libio-socket-ssl-perl : swaks --tls / --tls-on-connect
#   libio-socket-inet6-perl, libdigest-hmac-perl : swaks over ::1, CRAM-MD5
#   redis-server                        : shared-state tests of later issues
#   cargo-fuzz                          : `cargo +nightly fuzz run` smoke in .ci/run
#   Exim 4 (unpacked, not installed)    : tests/smarthost_exim.rs (.ci/install-exim.sh)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi

want=(swaks libnet-ssleay-perl libio-socket-ssl-perl libio-socket-inet6-perl
    libdigest-hmac-perl openssl python3 redis-server)
missing=()
for pkg in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]})); then
    echo "install.sh: installing ${missing[*]}"
    $SUDO apt-get update -q </dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
    echo "install.sh: apt packages present (${want[*]})"
fi

"$(dirname "$0")/install-exim.sh"

if cargo fuzz --version >/dev/null 2>&1; then
    echo "install.sh: cargo-fuzz present ($(cargo fuzz --version 2>/dev/null))"
else
    echo "install.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked </dev/null
fi
