#!/usr/bin/env bash
# Install what building and testing mailer needs on a fresh Debian 12 machine.
# Idempotent: installs only the packages that are missing.  Runs as root, or
# through sudo for another user.
set -euo pipefail

packages=(
	postgresql-15 postgresql-server-dev-15	# server, headers, PGXS, pg_regress, Test::Cluster
	librdkafka-dev librocksdb-dev			# the two libraries mailer links
	rocksdb-tools							# ldb: tests read a job's RocksDB checkpoint
	kcat									# produce and inspect topics in tests and the demo
	libipc-run-perl							# PostgreSQL's TAP test modules need IPC::Run
	build-essential maven					# usually there; Maven fetches the Kafka jars
	procps psmisc							# pgrep, pkill, fuser in the service scripts
	libasan8 libgcc-12-dev					# AddressSanitizer for the fuzz harness (test/fuzz)
)

missing=()
# Java 17 runs the broker; install one only if the machine has none.
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all packages present"
	exit 0
fi

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo -E)
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
