"""The `raya deploy` command(s)."""
