"""What a node boots with: the cluster's identity, its users' keys, the add-ons' manifests,
and each node's Butane and Ignition, rendered from `templates/`."""
