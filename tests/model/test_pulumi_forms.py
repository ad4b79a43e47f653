"""Every setting as `pulumi config set` writes it reads as the same value written in YAML.

The forms come from Pulumi's documentation of `pulumi config set` (pulumi.com/docs/iac/cli/
commands/pulumi_config_set): a top-level value is stored as text ("true", "3", JSON given on
the command line); `--path` and `--type bool|int` store YAML booleans, numbers, lists and
mappings; `--secret` stores `secure:`. The program receives each setting as Pulumi's CLI
hands it over (`handed`, below) and must build the same StackConfig as `raya render` does.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pulumi
import pytest
import yaml

from raya.cloud.program import stack_values
from raya.errors import ConfigError
from raya.model.config import KEYS, load_stack_config, parse_stack_config, stack_file

BASE = """\
config:
  hcloud:token:
    secure: v1:AAAA
  raya:managedSubdomain: raya
  raya:parentZone: example.com
  raya:acmeEmail: ops@example.org
"""
USERS = "  raya:authorizedUsers: [octo-alice]\n"

# (setting, its value as YAML reads it natively, the other forms Pulumi's CLI writes of it).
# Each value differs from the default, so a form that is ignored fails the test.
FORMS: list[tuple[str, str, list[str]]] = [
    # `pulumi config set raya:controlPlaneSchedulable true` stores the text; `--type bool`
    # stores the YAML boolean; Config.get_bool also takes "True".
    ("controlPlaneSchedulable", "true", ['"true"', '"True"', "True"]),
    ("controlPlaneVolumeSize", "20", ['"20"']),
    ("controlPlanes", "3", ['"3"']),
    ("backupRetention", "14", ['"14"']),
    # `--path 'raya:authorizedUsers[0]' octo-bob` writes the block list; a list given on the
    # command line is stored as its JSON text.
    ("authorizedUsers", "\n    - octo-bob\n    - c", ["[octo-bob, c]", """'["octo-bob", "c"]'"""]),
    (
        "sshSources",
        "\n    - 203.0.113.0/24\n    - 2001:db8::/32",
        ['\'["203.0.113.0/24", "2001:db8::/32"]\''],
    ),
    ("apiSources", "[]", ["'[]'"]),
    (
        "backupS3",
        "\n    endpoint: minio.lab:9000\n    bucket: lab-backups",
        [
            """'{"endpoint": "minio.lab:9000", "bucket": "lab-backups"}'""",
            "{endpoint: minio.lab:9000, bucket: lab-backups}",
        ],
    ),
    ("clusterName", "lab-2", ['"lab-2"', "'lab-2'"]),
    ("location", "hel1", ['"hel1"']),
    # `pulumi config set raya:network public` stores the text; quoted, the same.
    ("network", "public", ['"public"', "'public'"]),
    # `--path 'raya:loadBalancers[0].name' mqtt` writes the block list; given whole on the
    # command line, its JSON text.
    (
        "loadBalancers",
        "\n    - name: mqtt\n      type: lb21",
        ["""'[{"name": "mqtt", "type": "lb21"}]'""", "[{name: mqtt, type: lb21}]"],
    ),
    ("networkZone", "eu-central", ['"eu-central"']),
    ("controlPlaneServerType", "cax21", ['"cax21"']),
    # A YAML number where text is expected: Pulumi hands over the text written.
    ("managedSubdomain", "2026", ['"2026"']),
    ("parentZone", "corp.example.org.", ['"corp.example.org."']),
    ("acmeEmail", "certs@example.net", ['"certs@example.net"']),
    ("networkRange", "10.8.0.0/16", ['"10.8.0.0/16"']),
    ("nodesSubnet", "10.0.2.0/24", ['"10.0.2.0/24"']),
    ("controlPlaneIp", "10.0.1.20", ['"10.0.1.20"']),
    ("loadBalancerSubnet", "10.0.128.0/24", ['"10.0.128.0/24"']),
    ("backupSchedule", '"@daily"', ["'@daily'"]),
    ("recoveryKit", "kits/lab.json", ['"kits/lab.json"']),
    ("fromRecoveryKit", "kits/old.json", ['"kits/old.json"']),
]
# Settings a form needs alongside it to be valid.
COMPANIONS = {
    "networkRange": "  raya:nodesSubnet: 10.8.1.0/24\n  raya:controlPlaneIp: 10.8.1.10\n",
    "nodesSubnet": "  raya:controlPlaneIp: 10.0.2.10\n",
    "controlPlaneIp": "",
    "networkZone": "  raya:location: fsn1\n",
    "loadBalancers": "  raya:network: public\n",
}
_SERIAL = itertools.count()


def write(tmp_path: Path, key: str, written: str) -> Path:
    path = stack_file(tmp_path, f"{key}-{next(_SERIAL)}")
    base = "".join(line for line in (BASE + USERS).splitlines(True) if f"raya:{key}:" not in line)
    path.write_text(f"{base}{COMPANIONS.get(key, '')}  raya:{key}: {written}\n")
    return path


def handed(path: Path) -> dict[str, str]:
    """The config Pulumi's CLI hands the program for the stack file at `path`: a top-level
    scalar as the text written (it is decoded into a string first), anything else as the JSON
    of the decoded value (pulumi/pulumi, sdk/go/common/resource/config/value.go,
    `Value.unmarshalValue`, `json.Marshal`: compact, keys sorted)."""
    root = yaml.compose(path.read_text())
    assert isinstance(root, yaml.MappingNode)
    config = next(node for key, node in root.value if key.value == "config")
    values = {}
    for key, node in config.value:
        if isinstance(node, yaml.ScalarNode):
            values[key.value] = node.value
        else:
            decoded = yaml.safe_load(yaml.serialize(node))
            values[key.value] = json.dumps(decoded, separators=(",", ":"), sort_keys=True)
    return values


def test_the_table_covers_every_setting() -> None:
    assert sorted(key for key, _, _ in FORMS) == sorted(KEYS)


@pytest.mark.parametrize(("key", "native", "forms"), FORMS, ids=[row[0] for row in FORMS])
def test_every_form_pulumi_writes_reads_as_the_yaml_value(
    tmp_path: Path, key: str, native: str, forms: list[str]
) -> None:
    expected = load_stack_config(write(tmp_path, key, native))
    default = load_stack_config(write(tmp_path, "clusterName", "raya"))
    assert expected != default, key
    for written in forms:
        assert load_stack_config(write(tmp_path, key, written)) == expected, written


@pytest.mark.parametrize(("key", "native", "forms"), FORMS, ids=[row[0] for row in FORMS])
def test_the_program_reads_what_pulumi_hands_it_as_the_render_does(
    tmp_path: Path, key: str, native: str, forms: list[str]
) -> None:
    try:
        for written in (native, *forms):
            path = write(tmp_path, key, written)
            pulumi.runtime.set_all_config(handed(path))
            from_program = parse_stack_config(stack_values(), str(path))
            assert from_program == load_stack_config(path), written
    finally:
        pulumi.runtime.set_all_config({})


@pytest.mark.parametrize(
    ("key", "written", "shown", "accepted"),
    [
        # Config.get_bool takes four texts only; YAML 1.1's `yes` is text to Pulumi.
        ("controlPlaneSchedulable", "yes", "'yes'", "true or false"),
        ("controlPlaneSchedulable", '"TRUE"', "'TRUE'", "true or false"),
        # Config.get_int is Python's int() of the text written: no hexadecimal, no fraction.
        ("controlPlaneVolumeSize", "0x14", "'0x14'", "a whole number of GB from 10 to 10240"),
        ("controlPlanes", '"3.0"', "'3.0'", "1, 3 or 5"),
        ("backupRetention", "1e1", "'1e1'", "a whole number of snapshots from 1 to 1000"),
        # Config.get_object is json.loads of the text: a YAML flow list as text is not JSON.
        ("authorizedUsers", "'[octo-alice]'", "'[octo-alice]'", "a non-empty list of GitHub"),
        ("sshSources", "'203.0.113.0/24'", "'203.0.113.0/24'", "a list of IPv4 or IPv6 CIDRs"),
        ("backupS3", "'endpoint=minio'", "'endpoint=minio'", "a mapping with endpoint"),
    ],
)
def test_a_value_no_getter_of_pulumi_reads_is_refused(
    tmp_path: Path, key: str, written: str, shown: str, accepted: str
) -> None:
    path = write(tmp_path, key, written)
    with pytest.raises(ConfigError) as caught:
        load_stack_config(path)
    assert str(caught.value).startswith(f"{path}: raya:{key} is {shown}; accepted: {accepted}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "written"),
    [
        # `pulumi config set --secret raya:acmeEmail ...`
        ("acmeEmail", "\n    secure: v1:AAAA"),
        # `pulumi config set --path --secret raya:backupS3.bucket ...`
        ("backupS3", "\n    endpoint: minio.lab:9000\n    bucket:\n      secure: v1:AAAA"),
    ],
)
def test_an_encrypted_setting_raya_reads_is_refused(tmp_path: Path, key: str, written: str) -> None:
    path = write(tmp_path, key, written)
    with pytest.raises(ConfigError) as caught:
        load_stack_config(path)
    assert str(caught.value) == (
        f"{path}: raya:{key} is encrypted (secure:); accepted: a plain value, set with "
        f"`pulumi config set raya:{key} <value>` (the secret settings are clusterHcloudToken, "
        "backupS3AccessKey, backupS3SecretKey, autoscalerHcloudToken)"
    )
