#!/usr/bin/env bash
# Build a newer librdkafka than Debian 12's 2.0.2 into a prefix of its own,
# for `make RDKAFKA_PREFIX=...` (see the Makefile).  2.2 added
# fetch.queue.backoff.ms: 2.0 stops fetching for a whole second once the
# prefetch queue is full, so its queue must hold a second of input (issue 16,
# the 5M-key worker's memory).
#
#   test/services/librdkafka.sh [PREFIX]    default: $RDKAFKA_PREFIX, else
#                                           /opt/librdkafka-<version>
#
# The source is the copy vendored in the rdkafka-sys crate, fetched with
# cargo (crates.io is a registry every machine of the project reaches) and
# checked against its SHA-256.  Only the C library is built (about 75 CPU-s).
# It needs the -dev packages of what Debian's librdkafka links: libssl-dev,
# libzstd-dev, liblz4-dev, zlib1g-dev, and libsasl2-dev for GSSAPI
# (RDKAFKA_GSSAPI=try builds without it when the headers are missing; test
# 063 runs a kinit command through GSSAPI); test/services/deps.sh installs
# them.  Idempotent: a no-op once PREFIX has this version.
#
# A cold build takes about 90 s (of which 1 s is cargo's download), so the
# installed library (without its static archives: 1/5 of the size) is kept
# in $MAILER_CACHE_DIR, as the Kafka jars are, and unpacked from there in a
# second.  Not the prefix itself: the cluster's user (postgres, when run as
# root) cannot read a $HOME of mode 700.  The archive's name has the
# version, the prefix (written into rdkafka.pc), the Debian release (the
# libraries it links) and this script's hash (the features built).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=env.sh
. "$HERE/env.sh"

CRATE_VERSION=4.10.0+2.12.1
CRATE_SHA256=e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77
VERSION=${CRATE_VERSION#*+}
prefix=${1:-${RDKAFKA_PREFIX:-/opt/librdkafka-$VERSION}}

if [ -e "$prefix/lib/librdkafka.so.1" ] &&
	grep -qx "Version: $VERSION" "$prefix/lib/pkgconfig/rdkafka.pc" 2>/dev/null; then
	echo "librdkafka: $VERSION present in $prefix"
	exit 0
fi

key=$(printf '%s\n' "$prefix" "$(cat /etc/debian_version 2>/dev/null)" "$(uname -m)" |
	cat - "$HERE/librdkafka.sh" | sha256sum | cut -c1-16)
cached=$MAILER_CACHE_DIR/librdkafka-$VERSION-$key.tar.gz
if [ -s "$cached" ]; then
	mkdir -p "$prefix"
	tar -xzf "$cached" -C "$prefix"
	echo "librdkafka: $VERSION unpacked into $prefix from $cached"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A throwaway crate that depends on exactly that version: cargo fetch puts
# the .crate (a tar.gz) in its registry cache.
mkdir -p "$work/fetch/src"
: >"$work/fetch/src/lib.rs"
cat >"$work/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-librdkafka"
version = "0.0.0"
edition = "2021"

[dependencies]
rdkafka-sys = { version = "=$CRATE_VERSION", default-features = false }
EOF
(cd "$work/fetch" && cargo fetch -q)
crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"rdkafka-sys-$CRATE_VERSION.crate" | head -1)
echo "$CRATE_SHA256  $crate" | sha256sum -c --quiet -
tar -xzf "$crate" -C "$work"

cd "$work/rdkafka-sys-$CRATE_VERSION/librdkafka"
# The features Debian's build has that a job's source.options may ask for:
# --enable-X makes configure fail when one is missing instead of leaving it
# out.  No libcurl, as in Debian's: with it, sasl.oauthbearer.method=oidc
# would make the worker fetch tokens over HTTP(S), which the option rules
# (src/plan/kafka_options.c) were not reviewed for.
gssapi=(--enable-gssapi)
[ "${RDKAFKA_GSSAPI:-}" != try ] || gssapi=()
./configure --no-download --prefix="$prefix" --libdir="$prefix/lib" \
	--enable-ssl --enable-zstd --enable-zlib --enable-lz4-ext --disable-curl "${gssapi[@]}" >"$work/configure.log" 2>&1 ||
	{ tail -30 "$work/configure.log"; exit 1; }
make -s -j"$(nproc)" -C src >"$work/make.log" 2>&1 || { tail -30 "$work/make.log"; exit 1; }
make -s -C src install >>"$work/make.log" 2>&1
mkdir -p "$MAILER_CACHE_DIR"
# Written aside, then renamed: a concurrent run never unpacks half an archive.
tar -czf "$cached.$$" -C "$prefix" --exclude='*.a' --exclude='rdkafka-static.pc' include lib
mv "$cached.$$" "$cached"
echo "librdkafka: $VERSION installed in $prefix ($(sed -n 's/^BUILT_WITH=[[:space:]]*//p' Makefile.config))"
