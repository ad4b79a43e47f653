# The Fedora CoreOS image for Hetzner Cloud, with k3s preinstalled, for one architecture:
# x86 (the default) or arm, built on a server of that architecture.
#
# A throwaway server is booted into Hetzner's rescue system, install.sh burns the pinned FCOS
# Hetzner artifact onto its disk and adds the pinned k3s binary, and the disk becomes a
# snapshot, with the pinned k3s-selinux RPM (k3s' SELinux policy) for the nodes to layer at
# their first boot. FCOS never boots here, so Ignition still runs on the first boot of every server
# made from the snapshot. The token comes from HCLOUD_TOKEN (and the API from HCLOUD_ENDPOINT).
#
# Built by `raya image build` (image/build.sh), which first checks the snapshot does not exist.

packer {
  required_plugins {
    hcloud = {
      source  = "github.com/hetznercloud/hcloud"
      version = ">= 1.6.0"
    }
  }
}

variable "cluster_name" {
  type        = string
  description = "The cluster the snapshot is built for: its managed_by label."
}

variable "location" {
  type        = string
  description = "Hetzner location of the throwaway build server: where one of its nodes runs."
}

variable "server_type" {
  type        = string
  description = "The build server's type, of the architecture built, sold there now: raya chooses it from Hetzner's catalogue (the smallest disk, as it becomes the snapshot's minimum, then the cheapest)."
}

variable "architecture" {
  type        = string
  default     = "x86"
  description = "Hetzner's name of the architecture to build for: x86 or arm."

  validation {
    condition     = contains(["x86", "arm"], var.architecture)
    error_message = "The architecture is x86 or arm, as Hetzner names them."
  }
}

variable "fcos_builds_url" {
  type        = string
  default     = "https://builds.coreos.fedoraproject.org"
  description = "Where Fedora CoreOS builds are published."
}

variable "k3s_releases_url" {
  type        = string
  default     = "https://github.com/k3s-io/k3s/releases/download"
  description = "Where k3s release binaries are published."
}

variable "k3s_selinux_releases_url" {
  type        = string
  default     = "https://github.com/k3s-io/k3s-selinux/releases/download"
  description = "Where k3s-selinux release RPMs are published."
}

locals {
  # The pins are the one source of truth: the same files decide the labels raya looks up.
  fcos = jsondecode(file("${path.root}/fcos.pin"))
  k3s  = jsondecode(file("${path.root}/k3s.pin"))
  # A sha256 not recorded yet (null) is handed on as "unrecorded", which install.sh refuses
  # (raya refuses it earlier): no build, but the template still validates.
  k3s_selinux = jsondecode(file("${path.root}/k3s-selinux.pin"))

  # Per architecture: FCOS' name of it, k3s' release asset and the pins' sha256 field.
  architectures = {
    x86 = { fcos = "x86_64", k3s_binary = "k3s", sha256 = "sha256" }
    arm = { fcos = "aarch64", k3s_binary = "k3s-arm64", sha256 = "aarch64_sha256" }
  }
  arch = local.architectures[var.architecture]

  fcos_image_url = "${var.fcos_builds_url}/prod/streams/${local.fcos.stream}/builds/${local.fcos.version}/${local.arch.fcos}/fedora-coreos-${local.fcos.version}-hetzner.${local.arch.fcos}.raw.xz"
  k3s_binary_url = "${var.k3s_releases_url}/${local.k3s.version}/${local.arch.k3s_binary}"
  # Tag v<version>.<channel>.<release> -> k3s-selinux-<version>-<release>.coreos.noarch.rpm
  # (k3s-selinux's scripts/version and policy/coreos/k3s-selinux.spec; raya.pins the same).
  k3s_selinux_tag     = split(".", local.k3s_selinux.version)
  k3s_selinux_rpm_url = "${var.k3s_selinux_releases_url}/${local.k3s_selinux.version}/k3s-selinux-${replace(local.k3s_selinux_tag[0], "v", "")}.${local.k3s_selinux_tag[1]}-${local.k3s_selinux_tag[3]}.coreos.noarch.rpm"

  # Hetzner label values may not contain "+" (k3s versions do): the same rule as raya.pins.
  labels = {
    managed_by          = replace(var.cluster_name, "+", "-")
    os                  = "fcos"
    fcos_stream         = replace(local.fcos.stream, "+", "-")
    fcos_version        = replace(local.fcos.version, "+", "-")
    k3s_version         = replace(local.k3s.version, "+", "-")
    k3s_selinux_version = replace(local.k3s_selinux.version, "+", "-")
  }
}

source "hcloud" "fcos" {
  # Any image will do (the plugin takes the one of the server type's architecture): the
  # server boots into the rescue system and its disk is overwritten.
  image        = "debian-12"
  rescue       = "linux64"
  location     = var.location
  server_type  = var.server_type
  ssh_username = "root"

  snapshot_name   = "${var.cluster_name}-fcos-${local.fcos.version}-${local.arch.fcos}-k3s-${local.labels.k3s_version}"
  snapshot_labels = local.labels
}

build {
  sources = ["source.hcloud.fcos"]

  provisioner "shell" {
    script = "${path.root}/install.sh"
    environment_vars = [
      "FCOS_IMAGE_URL=${local.fcos_image_url}",
      "FCOS_SHA256=${local.fcos[local.arch.sha256]}",
      "K3S_BINARY_URL=${local.k3s_binary_url}",
      "K3S_SHA256=${local.k3s[local.arch.sha256]}",
      "K3S_SELINUX_RPM_URL=${local.k3s_selinux_rpm_url}",
      "K3S_SELINUX_SHA256=${coalesce(local.k3s_selinux.sha256, "unrecorded")}",
      "DISK=/dev/sda",
    ]
  }
}
