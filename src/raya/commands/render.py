"""The `raya render` command(s)."""
