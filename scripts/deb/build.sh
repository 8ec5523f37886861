#!/usr/bin/env bash
# Builds $BIN/l4lb_VERSION_amd64.deb with dpkg-deb from the tree that
# `make install` stages (one list of what goes where), plus the package's
# own files: control, conffiles, md5sums, maintainer scripts (this
# directory), copyright, changelog.gz. Prints the .deb's path.
#
# DEB_VERSION: default 0.0~gitYYYYMMDD.HASH of HEAD (+dirty when the tree
# has changes): Debian versions must start with a digit, and this one
# sorts by commit date.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
BIN=${BIN:-bin}
MAINTAINER=${DEB_MAINTAINER:-l4lb maintainers <l4lb@lists.l4lb.org>}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
if [ -z "${DEB_VERSION:-}" ]; then
  DEB_VERSION="0.0~git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d).$(git rev-parse --short=7 HEAD)"
  git diff --quiet HEAD 2>/dev/null || DEB_VERSION+="+dirty"
fi
ARCH=amd64

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$BIN"
BIN=$(cd "$BIN" && pwd)

# The binary: static (no libc dependency to declare), stripped, no local
# paths in it. The rest is `make install` with Debian's paths.
CGO_ENABLED=0 GOFLAGS=-trimpath make --no-print-directory -s install \
  GO="$GO" BIN="$work/bin" EXTRA_LDFLAGS="-s -w" DESTDIR="$root" \
  PREFIX=/usr SBINDIR=/usr/sbin UNITDIR=/lib/systemd/system DOCDIR=/usr/share/doc/l4lb \
  SYSCONFDIR=/etc MANDIR=/usr/share/man ZSHCOMPDIR=/usr/share/zsh/vendor-completions >/dev/null

doc=$root/usr/share/doc/l4lb
install -m 0644 scripts/deb/copyright "$doc/copyright"
{
  echo "l4lb ($DEB_VERSION) unstable; urgency=medium"
  echo
  echo "  * Built from commit $(git rev-parse HEAD)."
  echo
  echo " -- $MAINTAINER  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
gzip -9n "$root"/usr/share/man/man*/*
install -D -m 0644 scripts/deb/lintian-overrides "$root/usr/share/lintian/overrides/l4lb"
# The example in the docs is the conffile's twin: one copy, in examples/.
rm -f "$doc/l4lb.toml"

mkdir -p "$root/DEBIAN"
for s in postinst prerm postrm; do
  install -m 0755 "scripts/deb/$s" "$root/DEBIAN/$s"
done
echo /etc/l4lb/l4lb.toml > "$root/DEBIAN/conffiles"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: l4lb
Version: $DEB_VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $size
Section: net
Priority: optional
Homepage: https://github.com/l4lb/l4lb
Description: Layer-4 TCP/UDP load balancer with an XDP fast path
 l4lb balances TCP connections and UDP sessions over backends such as
 PostgreSQL, MySQL, Redis and WebSocket servers: splice(2) in proxy mode,
 an XDP program with direct server return in xdp mode, Maglev and least
 connection algorithms, health checks, drains, reloads without dropped
 connections, and BGP announcements for ECMP.
 .
 Installing the package does not start the service: edit
 /etc/l4lb/l4lb.toml, check it with "l4lb check", then
 "systemctl enable --now l4lb".
CONTROL
chmod 0644 "$root/DEBIAN/control"

deb=$BIN/l4lb_${DEB_VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
