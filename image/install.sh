#!/usr/bin/env bash
# Burns the pinned Fedora CoreOS Hetzner image onto DISK, installs the pinned k3s binary
# as /usr/local/bin/k3s of the deployed system and puts the pinned k3s-selinux RPM at
# /usr/local/share/raya/k3s-selinux.rpm, which each node layers at its first boot (rpm-ostree
# needs a booted FCOS: this is not one). Only /var/usrlocal is written: FCOS' first boot
# creates and labels /var/lib and the rest of /var only where they do not exist yet
# (ignition-ostree-populate-var). Runs as root in Hetzner's rescue system (Packer's shell
# provisioner); tests run it against a loop device.
#
# Inputs (environment): FCOS_IMAGE_URL, FCOS_SHA256 (of the .raw.xz), K3S_BINARY_URL,
# K3S_SHA256, K3S_SELINUX_RPM_URL, K3S_SELINUX_SHA256, DISK (default /dev/sda).
#
# Nothing touches DISK until every download matches its pinned sha256 and the image is known
# to fit. The root partition is found by reading the GPT and mounted by offset, because the
# kernel does not always create partition nodes (loop devices) and udev may not have run.
set -euo pipefail

fail() {
  echo "install.sh: $*" >&2
  exit 1
}

for name in FCOS_IMAGE_URL FCOS_SHA256 K3S_BINARY_URL K3S_SHA256 K3S_SELINUX_RPM_URL K3S_SELINUX_SHA256; do
  [ -n "${!name:-}" ] || fail "$name is not set"
done
for name in FCOS_SHA256 K3S_SHA256 K3S_SELINUX_SHA256; do
  [[ ${!name} =~ ^[0-9a-f]{64}$ ]] || fail "$name is '${!name}'; expected 64 lowercase hex digits"
done
DISK=${DISK:-/dev/sda}
[ -b "$DISK" ] || fail "DISK $DISK is not a block device"
[ "$(id -u)" -eq 0 ] || fail "must run as root (it writes $DISK)"

work=$(mktemp -d)
mnt="$work/root"
part=""
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || echo "install.sh: could not unmount $mnt" >&2; fi
  if [ -n "$part" ]; then losetup -d "$part" || echo "install.sh: could not detach $part" >&2; fi
  rm -rf "$work"
}
trap cleanup EXIT

download() { # url file
  echo "downloading $1"
  curl --fail --location --silent --show-error --retry 3 --connect-timeout 20 --output "$2" "$1" \
    || fail "could not download $1"
}

verify() { # file expected-sha256 what consequence
  local actual
  actual=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$actual" = "$2" ] || fail "$3: sha256 is $actual, pinned $2; $4"
}

download "$FCOS_IMAGE_URL" "$work/fcos.raw.xz"
download "$K3S_BINARY_URL" "$work/k3s"
download "$K3S_SELINUX_RPM_URL" "$work/k3s-selinux.rpm"
verify "$work/fcos.raw.xz" "$FCOS_SHA256" "$FCOS_IMAGE_URL" "$DISK left untouched"
verify "$work/k3s" "$K3S_SHA256" "$K3S_BINARY_URL" "$DISK left untouched"
verify "$work/k3s-selinux.rpm" "$K3S_SELINUX_SHA256" "$K3S_SELINUX_RPM_URL" "$DISK left untouched"

# `xz --robot --list` ends with a totals line whose 5th field is the uncompressed size.
image_size=$(xz --robot --list "$work/fcos.raw.xz" | awk -F'\t' '$1 == "totals" { print $5 }')
disk_size=$(blockdev --getsize64 "$DISK")
[ "$image_size" -le "$disk_size" ] \
  || fail "the image ($image_size bytes) does not fit on $DISK ($disk_size bytes); $DISK left untouched"

echo "writing $(basename "$FCOS_IMAGE_URL") to $DISK"
# Old signatures (e.g. a backup GPT at the end of a bigger disk) would outlive the image.
wipefs --all --quiet "$DISK"
xz --decompress --stdout "$work/fcos.raw.xz" | dd of="$DISK" bs=4M iflag=fullblock conv=fsync status=none
blockdev --flushbufs "$DISK"

# Lines of `sfdisk --dump` look like
#   /dev/sda4 : start=     1050624, size=     5156831, type=..., uuid=..., name="root"
table=$(sfdisk --dump "$DISK") || fail "$DISK holds no readable partition table after writing the image"
sector=$(sed -n 's/^sector-size: *\([0-9]*\)$/\1/p' <<<"$table")
roots=$(grep -E ', name="root"(,|$)' <<<"$table" || true)
if [ -z "$roots" ] || [ "$(wc -l <<<"$roots")" -ne 1 ]; then
  fail "the image on $DISK has no single partition named 'root'"
fi
start=$(sed -n 's/.* start= *\([0-9]*\),.*/\1/p' <<<"$roots")
size=$(sed -n 's/.* size= *\([0-9]*\),.*/\1/p' <<<"$roots")
if [ -z "$sector" ] || [ -z "$start" ] || [ -z "$size" ]; then
  fail "could not read the 'root' partition of $DISK"
fi

part=$(losetup --find --show --offset $((start * sector)) --sizelimit $((size * sector)) "$DISK")
mkdir "$mnt"
mount "$part" "$mnt"
var="$mnt/ostree/deploy/fedora-coreos/var"
[ -d "$var" ] || fail "the 'root' partition of $DISK has no ostree/deploy/fedora-coreos/var"

# /usr/local of the deployed system is /var/usrlocal.
install -d -o root -g root -m 0755 "$var/usrlocal" "$var/usrlocal/bin"
install -o root -g root -m 0755 "$work/k3s" "$var/usrlocal/bin/k3s"
verify "$var/usrlocal/bin/k3s" "$K3S_SHA256" "the installed k3s" "$DISK is not usable"
install -d -o root -g root -m 0755 "$var/usrlocal/share" "$var/usrlocal/share/raya"
install -o root -g root -m 0644 "$work/k3s-selinux.rpm" "$var/usrlocal/share/raya/k3s-selinux.rpm"
verify "$var/usrlocal/share/raya/k3s-selinux.rpm" "$K3S_SELINUX_SHA256" "the installed k3s-selinux RPM" "$DISK is not usable"
sync
umount "$mnt"
losetup -d "$part"
part=""
# The snapshot is taken of the disk, not of any cache.
sync
blockdev --flushbufs "$DISK"
echo "installed k3s and the k3s-selinux RPM in /usr/local of the FCOS image on $DISK"
