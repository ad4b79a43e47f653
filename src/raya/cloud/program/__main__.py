"""Entry point Pulumi runs (`main: src/raya/cloud/program/` in Pulumi.yaml), from the
project root."""

import sys
from pathlib import Path

import pulumi

from raya.cloud.program import main
from raya.errors import RayaError
from raya.model.project import find_root

# Running a folder puts it first on sys.path, where cluster.py, dns.py and network.py would
# shadow top-level modules of those names (dnspython's `dns`); raya imports them by package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).parent.resolve():
    del sys.path[0]

try:
    main(find_root(Path.cwd()))
except RayaError as error:
    # Pulumi reports a RunError as its message alone, where anything else gets a traceback.
    raise pulumi.RunError(str(error)) from None
