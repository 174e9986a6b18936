#!/usr/bin/env bash
# PgBouncer 1.21 or later on Debian 12, whose own is 1.18: fetches Debian
# 13's (trixie) pgbouncer and the libraries it loads, its C library
# included, into a directory of their own, without installing anything or
# touching the system's apt sources, and prints the path of a wrapper that
# runs it with them. Give that path to deploy/local/pgbouncer.sh as
# PGBOUNCER_BIN to run the pooler with prepared statements tracked
# (PGBOUNCER_PREPARED_STATEMENTS), which is what
# DATABASE_POOLER_PREPARED_STATEMENTS=true needs:
#
#   PGBOUNCER_BIN=$(bash deploy/local/pgbouncer-trixie.sh) make test-pooled POOLER_PREPARED=200
#
# Debian 12's loader cannot run it (trixie's pgbouncer needs glibc 2.38),
# so the wrapper starts trixie's loader on trixie's libraries. On a machine
# with PgBouncer 1.21 or later installed, use that instead.
#
# Environment: PGBOUNCER_TRIXIE_DIR (default $REPO/.local/pgbouncer-trixie,
# or as root a directory under /tmp, readable by the postgres user that
# PgBouncer drops to). Needs apt-get and Debian's archive keyring.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ "$(id -u)" -eq 0 ]; then
  DIR="${PGBOUNCER_TRIXIE_DIR:-/tmp/paysvc-pgbouncer-trixie}"
else
  DIR="${PGBOUNCER_TRIXIE_DIR:-$REPO/.local/pgbouncer-trixie}"
fi
WRAPPER="$DIR/pgbouncer"
# pgbouncer and what its binary loads (ld.so --list), trixie's names.
PACKAGES=(pgbouncer libc6 libcares2 libevent-2.1-7t64 libssl3t64 libsystemd0 libpam0g
  libzstd1 libcap2 libaudit1 libcap-ng0 zlib1g)

die() { echo "pgbouncer-trixie.sh: ERROR: $*" >&2; exit 1; }

# As root the directory is under /tmp: one someone else made, or could
# write to, is not run.
if [ -e "$DIR" ] && { [ ! -O "$DIR" ] || [ -n "$(find "$DIR" -maxdepth 0 -perm /022)" ]; }; then
  die "$DIR is not this user's own, or others may write to it: remove it, or set PGBOUNCER_TRIXIE_DIR"
fi
if [ -x "$WRAPPER" ] && "$WRAPPER" --version >/dev/null 2>&1; then
  echo "$WRAPPER"
  exit 0
fi

command -v apt-get >/dev/null || die "apt-get not found (a Debian machine is assumed)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring not found (package debian-archive-keyring)"

rm -rf "$DIR"
(umask 022 && mkdir -p "$DIR/apt/lists/partial" "$DIR/apt/cache/archives/partial" "$DIR/apt/parts" "$DIR/debs" "$DIR/root")
echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" >"$DIR/apt/sources.list"
# apt with its own configuration, sources, lists and cache: the system's
# are left alone, and its hooks (apt.conf.d: AppStream, PackageKit) not run.
printf 'Dir::Etc::Main "/dev/null";\nDir::Etc::Parts "%s";\n' "$DIR/apt/parts" >"$DIR/apt/apt.conf"
export APT_CONFIG="$DIR/apt/apt.conf"
apt=(apt-get -q -o "Dir::Etc::SourceList=$DIR/apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
  -o "Dir::State::Lists=$DIR/apt/lists" -o "Dir::Cache=$DIR/apt/cache" -o Debug::NoLocking=1
  -o APT::Sandbox::User=root)
"${apt[@]}" update >"$DIR/apt.log" 2>&1 || { cat "$DIR/apt.log" >&2; die "apt-get update (trixie) failed"; }
(cd "$DIR/debs" && "${apt[@]}" download "${PACKAGES[@]}") >>"$DIR/apt.log" 2>&1 ||
  { cat "$DIR/apt.log" >&2; die "apt-get download failed"; }
for deb in "$DIR"/debs/*.deb; do
  dpkg-deb -x "$deb" "$DIR/root"
done

lib="$DIR/root/usr/lib/x86_64-linux-gnu"
[ -x "$lib/ld-linux-x86-64.so.2" ] || die "trixie's loader not found under $lib (not x86_64?)"
cat >"$WRAPPER" <<SH
#!/bin/sh
# Debian trixie's pgbouncer on trixie's own libraries (deploy/local/pgbouncer-trixie.sh).
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:$DIR/root/lib/x86_64-linux-gnu" "$DIR/root/usr/sbin/pgbouncer" "\$@"
SH
chmod -R a+rX "$DIR"
chmod +x "$WRAPPER"
"$WRAPPER" --version >/dev/null 2>&1 || die "$WRAPPER does not run: $("$WRAPPER" --version 2>&1 | head -3)"
echo "$WRAPPER"
