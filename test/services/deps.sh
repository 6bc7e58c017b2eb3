#!/usr/bin/env bash
# Install what building and testing mailer needs on a fresh Debian 12 machine.
# Idempotent: installs only the packages that are missing.  Runs as root, or
# through sudo for another user.
set -euo pipefail

packages=(
	postgresql-15 postgresql-server-dev-15	# server, headers, PGXS, pg_regress, Test::Cluster
	postgresql-15-hll						# hll: an extension's aggregate in a job (tests 162, 166)
	librdkafka-dev librocksdb-dev			# libraries mailer links
	libmicrohttpd-dev						# ... and the HTTP worker's server
	libsasl2-dev libzstd-dev				# librdkafka.sh: a newer librdkafka with Debian's
	liblz4-dev zlib1g-dev					# ... features (libsasl2: GSSAPI, which test 063 uses)
	libwebsockets-dev libcurl4-openssl-dev	# Pulsar: its WebSocket API and admin REST API
	libssl-dev								# ... and a CA bundle for its TLS sessions
	curl openssl							# ... and pulsar.sh's admin calls and test certificates
	prometheus chromium						# tests scrape /metrics and load the dashboard
	rocksdb-tools							# ldb: tests read a job's RocksDB checkpoint
	kcat									# produce and inspect topics in tests and the demo
	libipc-run-perl							# PostgreSQL's TAP test modules need IPC::Run
	build-essential maven					# usually there; Maven fetches the Kafka and Pulsar jars
	procps psmisc							# pgrep, pkill, fuser in the service scripts
	locales									# de_DE.UTF-8: a job with translated messages (test 065)
	libasan8 libgcc-12-dev					# AddressSanitizer for the fuzz harness (test/fuzz)
)

# Test 065 runs a job whose owner's lc_messages is German; a server started
# before the locale existed does not see it until restarted.
german_locale()
{
	locale -a 2>/dev/null | grep -qix 'de_DE\.utf-\?8' && return
	echo "deps: generating the de_DE.UTF-8 locale"
	"${sudo[@]}" localedef -i de_DE -f UTF-8 de_DE.UTF-8
}

missing=()
# Java 17 runs the broker; install one only if the machine has none.
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo -E)

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all packages present"
	german_locale
	exit 0
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
german_locale
