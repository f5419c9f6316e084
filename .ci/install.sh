#!/usr/bin/env bash
# Install what floodgate's tests and CI need on a Debian machine. Idempotent:
# apt-get runs (with one `apt-get update`) only when a package is missing, and
# cargo-fuzz is built only when `cargo fuzz` is not already available.
#
#   swaks, python3 (with ssl), openssl : clients and certificates for tests/proxy_*.rs
#   libnet-ssleay-perl, libio-socket-ssl-perl : swaks --tls / --tls-on-connect
#   libio-socket-inet6-perl, libdigest-hmac-perl : swaks over ::1, CRAM-MD5
#   redis-server                        : shared-state tests of later issues
#   chromium, chromium-driver, python3-selenium : the web console's browser test (tests/operate/console.rs)
#   postfix, dovecot-core               : the real smart host of tests/smarthost_postfix*.rs
#                                         (private instances; no system daemon is left running)
#   prometheus (with promtool)          : tests/operate/prometheus.rs (rules check, real scrape)
#   chromium                            : tests/operate/report_html.rs (the HTML report, headless)
#   cargo-fuzz                          : `cargo +nightly fuzz run` smoke in .ci/run
#   cargo-deb                           : the .deb of .ci/package.sh
#   logrotate                           : .ci/package.sh rotates with the package's file
#   Exim 4 (unpacked, not installed)    : tests/smarthost/smarthost_exim.rs (.ci/install-exim.sh)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi

want=(swaks libnet-ssleay-perl libio-socket-ssl-perl libio-socket-inet6-perl
    libdigest-hmac-perl openssl python3 redis-server postfix dovecot-core prometheus
    chromium chromium-driver python3-selenium logrotate)
missing=()
for pkg in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]})); then
    echo "install.sh: installing ${missing[*]}"
    # Postfix must not ask which mail configuration to use, nor get one: the tests run
    # their own instances with `postfix -c DIR`.
    echo "postfix postfix/main_mailer_type select No configuration" | $SUDO debconf-set-selections
    # No package may start its daemon: deny service starts for the length of the install
    # when the machine has no policy of its own (Docker images usually do).
    policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# written by floodgate .ci/install.sh for one apt-get run\nexit 101\n' |
            $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        trap '$SUDO rm -f "$policy"' EXIT
    fi
    $SUDO apt-get update -q </dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
    echo "install.sh: apt packages present (${want[*]})"
fi

# Whatever installed them, no system Postfix or Dovecot may keep running (the tests start
# private instances; a system one would hold port 25 and add nothing).
for svc in postfix dovecot; do
    if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
        $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/$svc ]]; then
        $SUDO /etc/init.d/"$svc" stop >/dev/null 2>&1 || true
    fi
done

"$(dirname "$0")/install-exim.sh"

if cargo fuzz --version >/dev/null 2>&1; then
    echo "install.sh: cargo-fuzz present ($(cargo fuzz --version 2>/dev/null))"
else
    echo "install.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked </dev/null
fi

if cargo deb --version >/dev/null 2>&1; then
    echo "install.sh: cargo-deb present ($(cargo deb --version 2>/dev/null))"
else
    echo "install.sh: installing cargo-deb (once; kept in ~/.cargo/bin)"
    cargo install cargo-deb --locked </dev/null
fi
