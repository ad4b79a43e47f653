"""The `raya image` command(s)."""
