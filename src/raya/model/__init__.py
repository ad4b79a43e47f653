"""What the user declares, validated: the stack config, the fleet, the pins, the project.

Nothing here talks to the network or knows what a node boots with.
"""
