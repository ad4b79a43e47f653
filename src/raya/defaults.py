"""What raya uses unless told otherwise: the endpoints, names and times its commands'
options default to, each defined once.

Here, in a module that imports nothing, so that a command declares its options and shows
these in its help without loading the modules that use them (start-up time, issue 26); those
modules take them from here.
"""

DEFAULT_STACK = "prod"
GITHUB_URL = "https://github.com"
HCLOUD_API_URL = "https://api.hetzner.cloud/v1"
FCOS_BUILDS_URL = "https://builds.coreos.fedoraproject.org"
FCOS_STREAMS = ("stable", "testing", "next")
K3S_CHANNELS_URL = "https://update.k3s.io/v1-release/channels"
K3S_RELEASES_URL = "https://github.com/k3s-io/k3s/releases/download"
# k3s' SELinux policy: its release downloads and GitHub's API for its releases.
K3S_SELINUX_RELEASES_URL = "https://github.com/k3s-io/k3s-selinux/releases/download"
K3S_SELINUX_API_URL = "https://api.github.com/repos/k3s-io/k3s-selinux"
# The add-ons' Helm chart repositories.
CERT_MANAGER_CHARTS = "https://charts.jetstack.io"
EXTERNAL_DNS_CHARTS = "https://kubernetes-sigs.github.io/external-dns/"
HETZNER_CHARTS = "https://charts.hetzner.cloud"
AUTOSCALER_CHARTS = "https://kubernetes.github.io/autoscaler"
# `raya roll`: how long a node may take to drain, and to come back Ready.
DRAIN_TIMEOUT = 600.0
READY_TIMEOUT = 900.0
# How many of a pool's agents `raya roll` may have unavailable at once: a tenth, so that a
# pool of 200 rolls 20 at a time (bench/fleet.py), a pool under 20 one at a time.
MAX_UNAVAILABLE = "10%"
# How long `raya restore` waits for the API and every node Ready once the steps are done:
# the first control plane starts etcd from the snapshot, the others rejoin one by one.
RESTORE_READY_TIMEOUT = 600.0
# The option of `raya up` that deletes removed nodes without draining them (its errors
# name it).
WITHOUT_DRAIN = "--delete-without-drain"
