"""raya: a k3s cluster on Fedora CoreOS in Hetzner Cloud, named in Google Cloud DNS."""

__version__ = "0.1.0"
