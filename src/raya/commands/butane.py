"""The `raya butane` command(s)."""
