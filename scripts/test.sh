#!/usr/bin/env bash
# The one test command: installs what the tests need, then checks formatting, lints and doc links, runs
# every test in the workspace, and builds the fuzz targets. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cc >/dev/null 2>&1 || need+=(gcc)   # examples/ccserver.c against libsluicecc
command -v slowhttptest >/dev/null 2>&1 || need+=(slowhttptest)   # conditioning tests
command -v systemd-socket-activate >/dev/null 2>&1 || need+=(systemd)   # socket activation test
command -v gzip >/dev/null 2>&1 || need+=(gzip)   # precompressed siblings test
command -v chromium >/dev/null 2>&1 || need+=(chromium)   # status page test (headless)
[ -x /usr/sbin/haproxy ] || need+=(haproxy)   # PROXY protocol test (send-proxy-v2)
command -v wget >/dev/null 2>&1 || need+=(wget)   # errant-client test (loop), resumed download
command -v aria2c >/dev/null 2>&1 || need+=(aria2)   # parallel range downloads (clients test)
command -v dpkg-deb >/dev/null 2>&1 || need+=(dpkg)   # the apt test builds its packages
[ -x /usr/sbin/apache2 ] || need+=(apache2)   # redirects held against Apache's own (apache_parity test)
command -v ab >/dev/null 2>&1 || need+=(apache2-utils)   # kept answers without keep-alive (ab); PGO training
command -v wrk >/dev/null 2>&1 || need+=(wrk)   # the PGO build's training load (scripts/build-pgo.sh)
command -v openssl >/dev/null 2>&1 || need+=(openssl)   # HTTPS tests (test CA, s_client)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)   # pip against a listing as a package index (clients test)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)   # plot text
if ((${#need[@]})); then
    echo "installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo is needed (https://rustup.rs)"; exit 1; }
# The status test parses /server-status/metrics with Prometheus's own Python parsers.
python3 -c "import prometheus_client" 2>/dev/null || python3 -m pip install -q prometheus_client 2>/dev/null \
    || python3 -m pip install -q --break-system-packages prometheus_client

if cargo fmt --version >/dev/null 2>&1; then
    echo "== cargo fmt --check"
    cargo fmt --all -- --check
else
    echo "== rustfmt not installed (rustup component add rustfmt): format check skipped"
fi

if cargo clippy --version >/dev/null 2>&1; then
    echo "== cargo clippy (warnings are errors)"
    cargo clippy --quiet --workspace --all-targets -- -D warnings
else
    echo "== clippy not installed (rustup component add clippy): lint skipped"
fi

echo "== cargo doc (a broken or private doc link is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --workspace --no-deps

echo "== cargo test --workspace"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# A hung test must fail the run, not stall CI until its own limit: the whole test run
# gets TEST_TIMEOUT (default 30 minutes; today it takes a few).
set +e
timeout --kill-after=30s "${TEST_TIMEOUT:-30m}" cargo test --workspace 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "cargo test did not finish within ${TEST_TIMEOUT:-30m}: a test hangs"
fi

echo "== fuzz targets (build only; run them with: cd fuzz && cargo +nightly fuzz run parse_head)"
cargo build --quiet --manifest-path fuzz/Cargo.toml --bins

echo "== the PGO build (scripts/build-pgo.sh: instrumented build, training, release build, a served file checked)"
pgo=0
bash scripts/build-pgo.sh || pgo=$?

# One closing line with the totals over every test binary (cargo prints one line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
if [ "$pgo" != 0 ]; then
    echo "scripts/build-pgo.sh failed (exit $pgo)"
    [ "$status" != 0 ] || status=$pgo
fi
exit "$status"
