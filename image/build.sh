#!/usr/bin/env bash
# Builds the FCOS snapshot iff Hetzner has none with its labels yet (the spec's entry point).
# A thin wrapper: `raya image build` does the work. Arguments are passed on (e.g. --stack).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
raya="$root/.venv/bin/raya"
[ -x "$raya" ] || raya=raya
exec "$raya" image build --root "$root" "$@"
