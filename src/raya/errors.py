"""One exception type per domain; the CLI shows their message and nothing else.

Every message names the file and field at fault and says what would be accepted.
"""


class RayaError(Exception):
    """Base of every error a user can cause or fix; never shown with a traceback."""


class ConfigError(RayaError):
    """Bad stack config, pin file or fleet file."""


class KeysError(RayaError):
    """GitHub SSH keys could not be resolved."""


class ButaneError(RayaError):
    """A Butane config could not be transpiled; carries every diagnostic at once."""


class RenderError(RayaError):
    """A node config could not be rendered (template or size)."""


class ImageError(RayaError):
    """The FCOS image could not be checked or built."""


class DeployError(RayaError):
    """The Pulumi program or its engine failed."""
