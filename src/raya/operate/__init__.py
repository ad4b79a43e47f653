"""Day two: the status report, the rolling replacement, SSH to a node."""
