"""The `raya keys` command(s)."""
