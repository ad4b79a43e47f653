"""Entry point Pulumi runs (`main: src/raya/program/` in Pulumi.yaml), from the project root."""

from pathlib import Path

import pulumi

from raya.errors import RayaError
from raya.program import main
from raya.project import find_root

try:
    main(find_root(Path.cwd()))
except RayaError as error:
    # Pulumi reports a RunError as its message alone, where anything else gets a traceback.
    raise pulumi.RunError(str(error)) from None
