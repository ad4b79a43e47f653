"""Set-up (issue 36): what `scripts/bootstrap` installs and with which installer, and the
[deploy] extra that `./raya` installs when a command first needs it, never for its --help.

The installers are stand-ins that write down how they were called: the real ones would need
the package index, and no test leaves the machine. Each does to the disk what the real one
does and what the script relies on, as observed with uv 0.13.9 and pip 23.2 (the first
runs that bench/firstrun.py times use the real ones):
- `uv venv DIR` makes DIR/bin/python (uv's `venv` command), without pip;
- `pip install --target DIR uv` leaves the uv binary in DIR/bin/uv: pip installs into a
  temporary home scheme and moves its data folder, bin/ with the wheel's scripts, to DIR
  (pip/_internal/commands/install.py, `_handle_target_dir`);
- `python -m venv --without-pip DIR` makes DIR/bin/python, in which `-m pip` fails until
  `-m ensurepip` installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands.test_newcomer import clean_environment, fresh_project
from tests.support import REPO

# The stand-ins: each appends its name and arguments to $STAND_IN_LOG, one call a line.
PYTHON = f"""#!/bin/sh
echo "python $*" >>"$STAND_IN_LOG"
case "$1 $2" in
  "-c "*) exec {sys.executable} "$@" ;;
  "-m venv") mkdir -p "$4/bin" && cp "$0" "$4/bin/python" ;;
  "-m ensurepip") touch "$(dirname "$0")/pip" ;;
  "-m pip")
    case "$3" in
      --version) [ -n "$STAND_IN_OUTER_PIP" ] || [ -e "$(dirname "$0")/pip" ] ;;
      install)
        [ "$4" = -e ] && exit 0
        [ -z "$STAND_IN_NO_UV" ] || exit 1
        eval "target=\\${{$(($# - 1))}}"
        mkdir -p "$target/bin" && cp "$STAND_INS/uv" "$target/bin/uv" ;;
    esac ;;
esac
"""
UV = """#!/bin/sh
echo "uv $*" >>"$STAND_IN_LOG"
if [ "$1" = venv ]; then
  eval "venv=\\${$#}"
  mkdir -p "$venv/bin" && cp "$STAND_INS/python" "$venv/bin/python"
fi
"""


def checkout(tmp_path: Path) -> Path:
    """The two files bootstrap reads, in a folder of their own."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "bootstrap", root / "scripts" / "bootstrap")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def stand_ins(tmp_path: Path, uv_on_path: bool) -> dict[str, str]:
    folder = tmp_path / "stand-ins"
    on_path = tmp_path / "bin"
    folder.mkdir()
    on_path.mkdir()
    for name, text in (("python", PYTHON), ("uv", UV)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    if uv_on_path:
        (on_path / "uv").symlink_to(folder / "uv")
    return {
        "PATH": f"{on_path}:/usr/bin:/bin",
        "PYTHON": str(folder / "python"),
        "STAND_INS": str(folder),
        "STAND_IN_LOG": str(tmp_path / "calls"),
        "LANG": "C.UTF-8",
    }


def bootstrap(root: Path, env: dict[str, str], *args: str) -> tuple[list[str], str]:
    """Runs bootstrap; the installers' calls (python's version check left out) and stderr."""
    log = Path(env["STAND_IN_LOG"])
    log.write_text("")
    run = subprocess.run([str(root / "scripts" / "bootstrap"), *args], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    calls = [line for line in log.read_text().splitlines() if not line.startswith("python -c")]
    return calls, run.stderr


def test_uv_on_path_makes_the_venv_and_installs_what_is_asked_once(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    env = stand_ins(tmp_path, uv_on_path=True)
    venv = root / ".venv"
    python = f"--python {venv}/bin/python"
    calls, said = bootstrap(root, env)
    assert calls == [f"uv venv --quiet --python {env['PYTHON']} {venv}",
                     f"uv pip install {python} -e {root}"]  # fmt: skip
    assert said.splitlines()[0] == (
        "installing raya into .venv from the package index (once: then raya runs offline)..."
    )
    assert said.splitlines()[-1].startswith("installed raya in ")
    assert bootstrap(root, env) == ([], "")
    assert bootstrap(root, env, "deploy")[0] == [f"uv pip install {python} -e {root}[deploy]"]
    assert bootstrap(root, env, "deploy") == ([], "")
    # A new pyproject.toml: raya again, with the extra installed before.
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# changed\n")
    calls, said = bootstrap(root, env)
    assert calls == [f"uv pip install {python} -e {root}[deploy]"]
    assert said.startswith("installing raya[deploy] into .venv")
    assert bootstrap(root, env, "dev")[0] == [f"uv pip install {python} -e {root}[dev]"]
    assert bootstrap(root, env, "deploy") == ([], "")


def test_without_uv_it_is_fetched_into_the_venv_with_the_pip_at_hand(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    env = stand_ins(tmp_path, uv_on_path=False) | {"STAND_IN_OUTER_PIP": "1"}
    venv = root / ".venv"
    calls, said = bootstrap(root, env, "deploy")
    assert calls == [
        f"python -m venv --without-pip {venv}",
        "python -m pip --version",
        f"python -m pip install --only-binary :all: --target {venv}/uv uv",
        f"uv pip install --python {venv}/bin/python -e {root}[deploy]",
    ]
    assert "fetching uv, the installer..." in said.splitlines()
    # The next install takes the uv fetched.
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# changed\n")
    calls, _ = bootstrap(root, env)
    assert calls == [f"uv pip install --python {venv}/bin/python -e {root}[deploy]"]


def test_without_any_pip_the_venv_gets_its_own_to_fetch_uv(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    env = stand_ins(tmp_path, uv_on_path=False)
    venv = root / ".venv"
    calls, _ = bootstrap(root, env)
    assert calls == [
        f"python -m venv --without-pip {venv}",
        "python -m pip --version",  # none with the Python that made the venv
        "python -m pip --version",  # nor in the venv: ensurepip installs it
        "python -m ensurepip",
        f"python -m pip install --only-binary :all: --target {venv}/uv uv",
        f"uv pip install --python {venv}/bin/python -e {root}",
    ]


@pytest.mark.parametrize("why", ["RAYA_INSTALLER=pip", "uv cannot be fetched"])
def test_pip_installs_when_asked_or_when_uv_cannot_be_had(tmp_path: Path, why: str) -> None:
    root = checkout(tmp_path)
    env = stand_ins(tmp_path, uv_on_path=why == "RAYA_INSTALLER=pip") | {"STAND_IN_OUTER_PIP": "1"}
    if why == "RAYA_INSTALLER=pip":
        env["RAYA_INSTALLER"] = "pip"
    else:
        env["STAND_IN_NO_UV"] = "1"
    calls, said = bootstrap(root, env, "dev")
    assert not [call for call in calls if call.startswith("uv ")]
    assert calls[0] == f"python -m venv --without-pip {root}/.venv"
    assert calls[-1] == f"python -m pip install -e {root}[dev]"
    assert ("uv could not be installed: installing with pip, which takes longer" in said) == (
        why == "uv cannot be fetched"
    )


def test_an_unknown_installer_is_refused_naming_those_accepted(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    env = stand_ins(tmp_path, uv_on_path=True) | {"RAYA_INSTALLER": "poetry"}
    run = subprocess.run([str(root / "scripts" / "bootstrap")], env=env, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert (run.returncode, run.stderr) == (1, "RAYA_INSTALLER is 'poetry'; accepted: uv, pip\n")
    assert not (root / ".venv").exists()


# The [deploy] extra, installed on first need. Pulumi's SDK is hidden from raya by a package
# of its name, earlier on the path, that fails to import as a missing one does; the stand-in
# for ./raya's bootstrap "installs" it by removing that package.
HIDDEN = "raise ModuleNotFoundError(\"No module named 'pulumi'\", name='pulumi')\n"
INSTALLER = """#!/bin/sh
echo "$*" >>"{log}"
echo "installing the [$1] extra"
rm -r "{hidden}"
exit {status}
"""


def without_pulumi(tmp_path: Path, status: int = 0) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = clean_environment(tmp_path, bin_dir)
    hidden = tmp_path / "hidden"
    (hidden / "pulumi").mkdir(parents=True)
    (hidden / "pulumi" / "__init__.py").write_text(HIDDEN)
    source = env.get("PYTHONPATH") or str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join([str(hidden), source])
    log = tmp_path / "installed"
    installer = tmp_path / "bootstrap"
    installer.write_text(INSTALLER.format(log=log, hidden=hidden / "pulumi", status=status))
    installer.chmod(0o755)
    env["RAYA_BOOTSTRAP"] = str(installer)
    return env, log


def raya(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raya", *args], cwd=project, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize("command", ["preview", "up", "destroy", "status", "kubeconfig", "backups"])
def test_help_installs_nothing_and_the_first_run_installs_the_deploy_extra(
    tmp_path: Path, command: str
) -> None:
    env, log = without_pulumi(tmp_path)
    project = fresh_project(tmp_path)
    helped = raya(project, env, command, "--help")
    assert helped.returncode == 0, helped.stderr
    assert f"Usage: raya {command} [OPTIONS]" in helped.stdout
    assert not log.exists()
    ran = raya(project, env, command, "--root", str(project))
    assert log.read_text() == "deploy\n"
    assert ran.stdout == ""
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[:3] == [
        f"raya {command} needs raya's [deploy] extra (pulumi is missing)",
        "installing the [deploy] extra",
        # The next thing missing: Pulumi's packages loaded, as the real install leaves them.
        "error: the Pulumi CLI is missing or unusable and could not be installed "
        + ran.stderr.splitlines()[2].partition("could not be installed ")[2],
    ]


def test_a_failed_install_of_the_extra_says_so(tmp_path: Path) -> None:
    env, _ = without_pulumi(tmp_path, status=3)
    ran = raya(fresh_project(tmp_path), env, "preview")
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr.splitlines()[-1] == (
        f"error: installing raya's [deploy] extra for raya preview failed "
        f"(`{env['RAYA_BOOTSTRAP']} deploy` exited 3; its output is above)"
    )


def test_without_bootstrap_the_missing_extra_is_named_with_its_command(tmp_path: Path) -> None:
    env, log = without_pulumi(tmp_path)
    del env["RAYA_BOOTSTRAP"]
    ran = raya(fresh_project(tmp_path), env, "preview")
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr == (
        "error: raya preview needs the Pulumi packages (pulumi is missing): install raya's "
        "[deploy] extra, e.g. `scripts/bootstrap deploy`\n"
    )
    assert not log.exists()


def test_the_raya_script_sets_up_raya_alone_and_names_the_bootstrap(tmp_path: Path) -> None:
    """./raya installs no extra itself, --help or not: raya asks RAYA_BOOTSTRAP for one."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "raya", root / "raya")
    log = tmp_path / "calls"
    says = {"scripts/bootstrap": "bootstrap $*",
            ".venv/bin/raya": "raya $* with RAYA_BOOTSTRAP=$RAYA_BOOTSTRAP"}  # fmt: skip
    for path, line in says.items():
        (root / path).write_text(f'#!/bin/sh\necho "{line}" >>"{log}"\n')
        (root / path).chmod(0o755)
    for args in (["preview", "--help"], ["preview"], ["render", "--example"]):
        log.write_text("")
        subprocess.run([str(root / "raya"), *args], check=True)
        assert log.read_text().splitlines() == [
            "bootstrap ",
            f"raya {' '.join(args)} with RAYA_BOOTSTRAP={root}/scripts/bootstrap",
        ]
