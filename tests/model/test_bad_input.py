"""Bad input, class by class: each refused with one line naming the file or option, the value
and what is accepted, before anything is written (issue 35).

Each table holds several inputs of one class; the rule is built, not the case, so each class
mixes places (top level, nested, the last key, a key written with an escape) and files.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raya.cloud import kit
from raya.commands.registry import every_command
from raya.errors import ConfigError, RayaError
from raya.model.config import load_stack_config, parse_stack_config
from raya.model.fleet import build_cluster, load_fleet, server_name
from raya.model.pins import parse_chart_pins, parse_fcos_pin, parse_k3s_pin
from raya.model.project import EXAMPLE_ROOT
from raya.nodes.github_keys import load_keys_file
from tests.runner import invoke

EXAMPLE_STACK = EXAMPLE_ROOT / "Pulumi.example.yaml"
STACK = EXAMPLE_STACK.read_text()

# --- duplicate keys, in every file raya reads --------------------------------------------------
# (file name, reader, text, the key, its line): the line of the key's second occurrence.
Reader = Callable[[Path], object]
DUPLICATES: list[tuple[str, Reader, str, str, int]] = [
    ("agents.json", load_fleet, '{"agents": ["cx23"],\n "agents": []}', "agents", 2),
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "type": "cx23", "count": 1,\n'
        ' "addresses": "10.0.1.64/28",\n "labels": {"tier": "a", "tier": "b"}}]}',
        "tier",
        3,
    ),
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "name": "api", "type": "cx23", "count": 1, '
        '"addresses": "10.0.1.64/28"}]}',
        "name",
        1,
    ),
    # The same key, once escaped: JSON reads both as "count".
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "type": "cx23", "count": 1,\n "addresses": "10.0.1.64/28",'
        '\n  "\\u0063ount": 0}]}',
        "count",
        3,
    ),
    ("fcos.json", parse_fcos_pin, '{"stream": "stable",\n\n "stream": "next"}', "stream", 3),
    ("charts.json", parse_chart_pins, '{"a": {"version": "1"},\n "a": {"version": "2"}}', "a", 2),
    ("keys.json", load_keys_file, '{"octo-alice": [],\n  "octo-alice": []}', "octo-alice", 2),
    (
        "kit.json",
        lambda path: kit.load(path, load_stack_config(EXAMPLE_STACK)),
        '{"format": "raya-recovery-kit",\n "serverToken": "x",\n "serverToken": "y"}',
        "serverToken",
        3,
    ),
    (
        "Pulumi.prod.yaml",
        load_stack_config,
        STACK + "  raya:clusterName: other\n",
        "raya:clusterName",
        STACK.count("\n") + 1,
    ),
    (
        "Pulumi.prod.yaml",
        load_stack_config,
        STACK + "  raya:backupS3:\n    endpoint: a.example\n    bucket: abc\n    bucket: abd\n",
        "bucket",
        STACK.count("\n") + 4,
    ),
]


@pytest.mark.parametrize(("name", "read", "text", "key", "line"), DUPLICATES)
def test_a_key_twice_in_one_object_is_refused_naming_file_key_and_line(
    tmp_path: Path, name: str, read: Reader, text: str, key: str, line: int
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RayaError) as refused:
        read(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: line {line} column ")
    assert f"key {key!r} appears twice in one object; accepted: each key once" in message
    # Secrets stay out of the message: the recovery kit's values are never shown.
    assert '"x"' not in message and "'y'" not in message


@pytest.mark.parametrize(
    ("name", "read", "text", "constant"),
    [
        ("agents.json", load_fleet, '{"pools": [{"name": "web", "count": NaN}]}', "NaN"),
        ("agents.json", load_fleet, '{"agents": [Infinity]}', "Infinity"),
        ("fcos.json", parse_fcos_pin, '{"stream": "stable", "size": -Infinity}', "-Infinity"),
        ("keys.json", load_keys_file, '{"octo-alice": NaN}', "NaN"),
    ],
)
def test_numbers_json_does_not_have_are_refused(
    tmp_path: Path, name: str, read: Reader, text: str, constant: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RayaError) as refused:
        read(path)
    assert str(refused.value) == (
        f"{path}: not JSON: {constant} is not a JSON value; accepted: a number such as 1.5"
    )


def test_keys_only_alike_in_other_objects_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    pool = {"name": "web", "type": "cx23", "count": 1, "addresses": "10.0.1.64/28",
            "labels": {"name": "web"}}  # fmt: skip
    path.write_text(
        json.dumps({"pools": [pool, {**pool, "name": "api", "addresses": "10.0.1.80/28"}]})
    )
    assert [p.name for p in load_fleet(path).pools] == ["web", "api"]


# --- the fleet: what it means ------------------------------------------------------------------
BASE_STACK: dict[str, Any] = {
    "authorizedUsers": ["octo-alice"],
    "managedSubdomain": "raya",
    "parentZone": "example.com",
    "acmeEmail": "ops@example.org",
}


def web(**changes: Any) -> dict[str, Any]:
    return {"name": "web", "type": "cx23", "count": 2, "addresses": "10.0.1.64/28", **changes}


def fleet_refusal(tmp_path: Path, fleet: dict[str, Any], **stack: Any) -> str:
    """The one line `fleet` (and `stack` settings) is refused with, by reading or building."""
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(fleet))
    config = parse_stack_config({**BASE_STACK, **stack}, "Pulumi.test.yaml")
    with pytest.raises(ConfigError) as refused:
        build_cluster(config, load_fleet(path), str(path))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


# Every agent tainted NoSchedule or NoExecute and a tainted control plane: nowhere for the
# add-ons' install jobs, which tolerate nothing (helm-controller, chart.go, `job`).
NOWHERE_TO_INSTALL = [
    {"pools": [web(taints=["dedicated=db:NoSchedule"])]},
    {"pools": [web(taints=["a:PreferNoSchedule", "b:NoExecute"])]},
    {"pools": [web(taints=["gpu:NoSchedule"]),
               web(name="db", addresses="10.0.1.80/28", taints=["db:NoExecute"])]},
    # A pool of 0 nodes runs nothing, untainted or not.
    {"pools": [web(taints=["gpu:NoSchedule"]),
               web(name="spare", addresses="10.0.1.80/28", count=0)]},
]  # fmt: skip


@pytest.mark.parametrize("fleet", NOWHERE_TO_INSTALL)
def test_a_fleet_with_no_untainted_agent_is_refused(
    tmp_path: Path, fleet: dict[str, Any]
) -> None:
    message = fleet_refusal(tmp_path, fleet)
    assert message.startswith("every agent is tainted NoSchedule or NoExecute (pools ")
    assert "raya:controlPlaneSchedulable is false" in message
    assert "accepted: at least one agent without such a taint" in message


@pytest.mark.parametrize(
    ("fleet", "stack"),
    [
        ({"pools": [web(taints=["gpu:NoSchedule"])]}, {"controlPlaneSchedulable": True}),
        ({"agents": ["cx23"], "pools": [web(taints=["gpu:NoSchedule"])]}, {}),
        ({"pools": [web(taints=["a:PreferNoSchedule"])]}, {}),
        ({"pools": [web(taints=["gpu:NoExecute"]), web(name="db", addresses="10.0.1.80/28")]},
         {}),
    ],
)  # fmt: skip
def test_one_node_that_takes_the_jobs_is_enough(
    tmp_path: Path, fleet: dict[str, Any], stack: dict[str, Any]
) -> None:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(fleet))
    config = parse_stack_config({**BASE_STACK, **stack}, "Pulumi.test.yaml")
    assert build_cluster(config, load_fleet(path), str(path)).agents


# (a pool, what the line says about it): names, labels and taints.
BAD_POOLS: list[tuple[dict[str, Any], str]] = [
    (web(name="eu-web"), "pools[0]: field 'name' is 'eu-web'; accepted: 1-20 lowercase letters"),
    (web(name="control-plane"), "pools[0]: field 'name' is 'control-plane'; accepted: 1-20 "),
    (web(name="a-1"), "pools[0]: field 'name' is 'a-1'; accepted: 1-20 lowercase letters or "),
    (web(name="agent"), "pools[0] (agent): field 'name' is 'agent', reserved"),
    (web(name="agents"), "pools[0] (agents): field 'name' is 'agents', reserved"),
    (web(name="control"), "pools[0] (control): field 'name' is 'control', reserved"),
    (web(name="plane"), "pools[0] (plane): field 'name' is 'plane', reserved"),
    (web(name="planes"), "pools[0] (planes): field 'name' is 'planes', reserved"),
    (web(location=["fsn1"]), "pools[0] (web): field 'location' is ['fsn1']; accepted: fsn1, "),
    (web(location={"name": "fsn1"}), "pools[0] (web): field 'location' is {'name': 'fsn1'}; "),
    (web(location=None), "pools[0] (web): field 'location' is None; accepted: fsn1, nbg1"),
    (web(location="FSN1"), "pools[0] (web): field 'location' is 'FSN1'; accepted: fsn1, nbg1"),
    (web(labels={"kubernetes.io/hostname": "web-0"}),
     "pools[0] (web): field 'labels' key 'kubernetes.io/hostname': set by the kubelet"),
    (web(labels={"kubernetes.io/arch": "arm64"}),
     "pools[0] (web): field 'labels' key 'kubernetes.io/arch': set by the kubelet"),
    (web(labels={"beta.kubernetes.io/os": "linux"}),
     "pools[0] (web): field 'labels' key 'beta.kubernetes.io/os': set by the kubelet"),
    (web(labels={"node.kubernetes.io/instance-type": "cx23"}),
     "pools[0] (web): field 'labels' key 'node.kubernetes.io/instance-type': set by the cloud "
     "controller"),
    (web(labels={"topology.kubernetes.io/zone": "fsn1-dc14"}),
     "pools[0] (web): field 'labels' key 'topology.kubernetes.io/zone': set by the cloud"),
    (web(labels={"failure-domain.beta.kubernetes.io/region": "fsn1"}),
     "pools[0] (web): field 'labels' key 'failure-domain.beta.kubernetes.io/region': set by"),
    (web(labels={"node-role.kubernetes.io/worker": ""}),
     "pools[0] (web): field 'labels' key 'node-role.kubernetes.io/worker': a kubelet may set "
     "no such label on itself"),
    (web(labels={"k8s.io/team": "a"}),
     "pools[0] (web): field 'labels' key 'k8s.io/team': a kubelet may set no such label"),
    (web(taints=["node.kubernetes.io/unschedulable:NoSchedule"]),
     "pools[0] (web): field 'taints' 'node.kubernetes.io/unschedulable:NoSchedule': key "
     "'node.kubernetes.io/unschedulable' is one Kubernetes sets and removes"),
    (web(taints=["node.kubernetes.io/not-ready:NoExecute"]),
     "pools[0] (web): field 'taints' 'node.kubernetes.io/not-ready:NoExecute': key"),
    (web(taints=["node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"]),
     "pools[0] (web): field 'taints' 'node.cloudprovider.kubernetes.io/uninitialized=true:"
     "NoSchedule': key 'node.cloudprovider.kubernetes.io/uninitialized' is one Kubernetes"),
]  # fmt: skip


@pytest.mark.parametrize(("pool", "message"), BAD_POOLS)
def test_pools_kubernetes_or_hetzner_would_refuse_or_rewrite(
    tmp_path: Path, pool: dict[str, Any], message: str
) -> None:
    # Each next to an untainted pool, so that only the rule under test can refuse it.
    fleet = {"pools": [pool, web(name="other", addresses="10.0.1.96/28")]}
    assert fleet_refusal(tmp_path, fleet).startswith(message)


def test_labels_and_taints_of_ones_own_and_the_kubelets_namespaces_pass(tmp_path: Path) -> None:
    pool = web(
        labels={"node.kubernetes.io/exclude-from-external-load-balancers": "",
                "kubelet.kubernetes.io/pool": "web", "example.com/zone": "fsn1"},
        taints=["example.com/dedicated=db:NoSchedule", "CriticalAddonsOnly=true:NoExecute"],
    )  # fmt: skip
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": ["cx23"], "pools": [pool]}))
    assert load_fleet(path).pools[0].taints == tuple(pool["taints"])


CLUSTER_NAMES = ("ab", "abc", "ab-b", "ab-b-c", "ab-bc", "ab-control", "ab-agent", "ab-web", "ab-1",
                 "ab1")  # fmt: skip
POOL_NAMES = ("b", "c", "b-c", "bc", "web", "control", "plane", "planes", "agent", "agents",
              "control-plane", "1", "web1", "b-1")  # fmt: skip


def test_no_two_stacks_of_accepted_names_share_a_server_name(tmp_path: Path) -> None:
    """Every stack any of these cluster names and the pool names accepted among these would
    make (3 control planes, 2 listed agents, 11 nodes per pool): no server name in two."""
    accepted = []
    for k, name in enumerate(POOL_NAMES):
        path = tmp_path / f"{k}.json"
        path.write_text(json.dumps({"pools": [web(name=name)]}))
        try:
            load_fleet(path)
        except ConfigError:
            continue
        accepted.append(name)
    assert accepted == ["b", "c", "bc", "web", "web1"]
    pools = [web(name=name, count=11, addresses=f"10.0.1.{64 + 16 * k}/28")
             for k, name in enumerate(accepted)]  # fmt: skip
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": ["cx23", "cx23"], "pools": pools}))
    fleet = load_fleet(path)
    owner: dict[str, str] = {}
    for cluster_name in CLUSTER_NAMES:
        config = parse_stack_config(
            {**BASE_STACK, "clusterName": cluster_name, "controlPlanes": 3}, "Pulumi.test.yaml"
        )
        for node in build_cluster(config, fleet, str(path)).nodes:
            name = server_name(cluster_name, node.name)
            assert owner.setdefault(name, cluster_name) == cluster_name, name
    assert len(owner) == len(CLUSTER_NAMES) * (3 + 2 + 11 * len(accepted))


# --- backup settings ---------------------------------------------------------------------------
def stack_refusal(**settings: Any) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_stack_config({**BASE_STACK, **settings}, "Pulumi.test.yaml")
    message = str(refused.value)
    assert "\n" not in message
    return message


S3 = {"endpoint": "fsn1.your-objectstorage.com"}
# (the backupS3 mapping, what the line says after "raya:backupS3 ")
BAD_BUCKETS: list[tuple[dict[str, str], str]] = [
    ({**S3, "bucket": "192.168.10.20"}, "bucket is '192.168.10.20', shaped like an IPv4 address"),
    ({**S3, "bucket": "team..backups"}, "bucket is 'team..backups', with two dots in a row"),
    ({**S3, "bucket": "team.-backups"}, "bucket is 'team.-backups', with two dots in a row or a "
                                        "dot next to a '-'"),
    ({**S3, "bucket": "team-.backups"}, "bucket is 'team-.backups', with two dots"),
    ({**S3, "bucket": "xn--backups"}, "bucket is 'xn--backups', with a prefix S3 reserves"),
    ({**S3, "bucket": "sthree-backups"}, "bucket is 'sthree-backups', with a prefix S3 reserves"),
    ({**S3, "bucket": "backups-s3alias"}, "bucket is 'backups-s3alias', with a suffix S3"),
    ({**S3, "bucket": "backups.mrap"}, "bucket is 'backups.mrap', with a suffix S3 reserves"),
    ({"endpoint": "storage.googleapis.com", "bucket": "google-backups"},
     "bucket is 'google-backups', which begins with 'goog' or holds 'google'"),
    ({"endpoint": "storage.googleapis.com:443", "bucket": "my-g00gle-backups"},
     "bucket is 'my-g00gle-backups', which begins with 'goog'"),
    ({"endpoint": "STORAGE.googleapis.com", "bucket": "googbackups"},
     "bucket is 'googbackups', which begins with 'goog'"),
    ({"endpoint": "a..example", "bucket": "team"}, "endpoint is 'a..example'; accepted: a host "
                                                   "name or IPv4 address with an optional port"),
    ({"endpoint": ".example", "bucket": "team"}, "endpoint is '.example'; accepted: a host"),
    ({"endpoint": "-minio.lan", "bucket": "team"}, "endpoint is '-minio.lan'; accepted: a host"),
    ({"endpoint": "minio.lan:0", "bucket": "team"}, "endpoint is 'minio.lan:0'; accepted: a host"),
    ({"endpoint": "minio.lan:09000", "bucket": "team"}, "endpoint is 'minio.lan:09000'; accepted"),
    ({"endpoint": "minio.lan:65536", "bucket": "team"}, "endpoint is 'minio.lan:65536'; accepted"),
    ({"endpoint": "minio.lan:", "bucket": "team"}, "endpoint is 'minio.lan:'; accepted: a host"),
    ({"endpoint": "s3://minio.lan", "bucket": "team"}, "endpoint is 's3://minio.lan'; accepted"),
    ({"endpoint": "a" * 64 + ".example", "bucket": "team"}, f"endpoint is '{'a' * 64}.example'"),
    ({"endpoint": ".".join(["a" * 60] * 5), "bucket": "team"}, "endpoint is 'aaaa"),
]  # fmt: skip


@pytest.mark.parametrize(("backup_s3", "message"), BAD_BUCKETS)
def test_buckets_and_endpoints_s3_or_gcs_would_refuse(
    backup_s3: dict[str, str], message: str
) -> None:
    line = stack_refusal(backupS3=backup_s3)
    assert line.startswith(f"Pulumi.test.yaml: raya:backupS3 {message}")
    assert "; accepted: " in line


@pytest.mark.parametrize(
    "backup_s3",
    [
        {**S3, "bucket": "team.backups-1"},
        {**S3, "bucket": "a1b"},
        {"endpoint": "minio.lan:65535", "bucket": "my-google-backups"},  # not GCS: S3's rules
        {"endpoint": "10.0.0.5:9000", "bucket": "backups"},
        {"endpoint": "storage.googleapis.com", "bucket": "team-backups"},
    ],
)
def test_buckets_and_endpoints_that_pass(backup_s3: dict[str, str]) -> None:
    parsed = parse_stack_config({**BASE_STACK, "backupS3": backup_s3}, "Pulumi.test.yaml")
    assert parsed.backup_s3 is not None
    assert parsed.backup_s3.bucket == backup_s3["bucket"]


@pytest.mark.parametrize("name", ["google", "goog", "googly-prod", "prod-google", "my-g00gle",
                                  "go0gle1", "g0og1e"])  # fmt: skip
def test_a_cluster_name_gcs_would_refuse_as_its_buckets(name: str) -> None:
    assert stack_refusal(clusterName=name).startswith(
        f"Pulumi.test.yaml: raya:clusterName is {name!r}, which names the snapshots' GCS bucket "
        f"({name}-etcd-...), which begins with 'goog' or holds 'google'"
    )
    # With a bucket of its own elsewhere, the name makes no GCS bucket.
    other = {"endpoint": "minio.lan", "bucket": "team"}
    assert parse_stack_config(
        {**BASE_STACK, "clusterName": name, "backupS3": other}, "Pulumi.test.yaml"
    ).cluster_name == name


# --- the command line ---------------------------------------------------------------------------
# Per kind of value, inputs each command refuses, and what its line says is accepted.
BAD_VALUES: dict[str, tuple[tuple[str, ...], str]] = {
    "seconds": (("nan", "NaN", "inf", "-inf", "1e999", "-1", "-0.5", "0"),
                "is not a time to wait; accepted: a number of seconds greater than 0"),
    "stack": (("", "a/b", "prod eu", "../prod", "x" * 101, "prod\n"),
              "is not a stack name; accepted: 1-100 letters, digits, '_', '.' or '-'"),
    "url": (("", "api.hetzner.cloud/v1", "ftp://example.org", "https://", " https://a.example"),
            "is not a URL; accepted: an http:// or https:// URL with a host"),
    "path": (("",), "is not a path; accepted: a file or folder path"),
}  # fmt: skip
OPTION_CASES = [
    pytest.param(path, option.names[0], value, accepted, id=f"{' '.join(path)} {option.names[0]}")
    for path, command in every_command()
    for option in command.options
    if option.kind in BAD_VALUES
    for value, accepted in [(v, BAD_VALUES[option.kind][1]) for v in BAD_VALUES[option.kind][0]]
]


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


@pytest.mark.parametrize(("path", "name", "value", "accepted"), OPTION_CASES)
def test_every_option_refuses_what_it_cannot_mean_and_writes_nothing(
    path: tuple[str, ...], name: str, value: str, accepted: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "Pulumi.yaml").write_text("name: raya\n")
    before = files_under(tmp_path)
    result = invoke([*path, f"{name}={value}"])
    assert result.exit_code == 2, result.output
    last = result.stderr.rstrip("\n").rsplit("\n", 1)[-1] if "\n" not in value else ""
    hint = next(o.hint for p, c in every_command() if p == path for o in c.options
                if o.names[0] == name)  # fmt: skip
    expected = f"Error: Invalid value for {hint}: {value!r} {accepted}"
    if last:
        assert last.startswith(expected)
    else:  # a value holding a line break: its repr keeps the line whole
        assert expected in result.stderr
    assert files_under(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "dest", "value"),
    [
        (["roll", "--drain-timeout", "0.5"], "drain_timeout", 0.5),
        (["roll", "--ready-timeout=1e3"], "ready_timeout", 1000.0),
        (["up", "--stack", "prod.eu_1-A"], "stack", "prod.eu_1-A"),
        (["keys", "-s", "x" * 100], "stack", "x" * 100),
        (["status", "--hcloud-endpoint", "http://127.0.0.1:8080/v1"], "hcloud_endpoint",
         "http://127.0.0.1:8080/v1"),
    ],
)  # fmt: skip
def test_values_the_options_accept(args: list[str], dest: str, value: object) -> None:
    command = dict(every_command())[(args[0],)]
    parsed = command.parse(args[1:])
    assert parsed is not None
    assert parsed[dest] == value


@pytest.mark.parametrize("target", ["folder", "folder/missing/keys.json", "file/keys.json"])
def test_keys_save_the_file_system_refuses_leaves_nothing_behind(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`raya keys --save` to a folder, under a missing folder or under a file: one line
    naming the path, and no file left, whole or partial (not even the temporary one)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("kept\n")
    before = files_under(tmp_path)
    saved = tmp_path / target
    result = invoke(["keys", "--example", "--save", str(saved)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(f"error: {saved}: cannot write the keys file")
    assert files_under(tmp_path) == before
    assert (tmp_path / "file").read_text() == "kept\n"


def test_a_key_a_yaml_merge_brings_in_may_be_written_again(tmp_path: Path) -> None:
    """`<<: *anchor` then the same key: YAML's override, not a key written twice."""
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(
        STACK + "  raya:backupS3:\n    <<: &store {endpoint: a.example, bucket: abc}\n"
        "    bucket: abd\n"
    )
    parsed = load_stack_config(path)
    assert parsed.backup_s3 is not None
    assert (parsed.backup_s3.endpoint, parsed.backup_s3.bucket) == ("a.example", "abd")


# --- nothing written: `raya render` refusing each class --------------------------------------
def render_project(tmp_path: Path, stack_extra: str, fleet: str) -> Path:
    """The example project, with `stack_extra` appended to its stack file and `fleet` as its
    fleet file."""
    root = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, root)
    (root / "Pulumi.yaml").write_text("name: raya\n")
    (root / "Pulumi.example.yaml").write_text(STACK + stack_extra)
    (root / "deploy" / "fleet" / "agents.json").write_text(fleet)
    return root


GOOD_FLEET = json.dumps({"agents": ["cx23"], "pools": [web()]})
RENDER_REFUSALS = [
    ("", '{"agents": ["cx23"], "agents": ["cx33"]}', "deploy/fleet/agents.json",
     "line 1 column 22: key 'agents' appears twice"),
    ("  raya:location: fsn1\n", GOOD_FLEET, "Pulumi.example.yaml",
     f"line {STACK.count(chr(10)) + 1} column 3: key 'raya:location' appears twice"),
    ("", json.dumps({"pools": [web(taints=["a:NoSchedule"])]}), "deploy/fleet/agents.json",
     "every agent is tainted NoSchedule or NoExecute"),
    ("", json.dumps({"pools": [web(name="eu-web")]}), "deploy/fleet/agents.json",
     "pools[0]: field 'name' is 'eu-web'; accepted: "),
    ("", json.dumps({"agents": ["cx23"], "pools": [web(labels={"kubernetes.io/arch": "arm64"})]}),
     "deploy/fleet/agents.json", "pools[0] (web): field 'labels' key 'kubernetes.io/arch'"),
    ("  raya:backupS3: {endpoint: a.example, bucket: a..b}\n", GOOD_FLEET,
     "Pulumi.example.yaml", "raya:backupS3 bucket is 'a..b', with two dots"),
]  # fmt: skip


@pytest.mark.parametrize(("stack_extra", "fleet", "file", "message"), RENDER_REFUSALS)
def test_render_refusing_bad_input_writes_nothing(
    tmp_path: Path, stack_extra: str, fleet: str, file: str, message: str
) -> None:
    root = render_project(tmp_path, stack_extra, fleet)
    before = files_under(root)
    result = invoke(["render", "--root", str(root), "--stack", "example", "--out",
                     str(root / "out")])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {root / file}: {message}")
    assert files_under(root) == before


def test_render_of_the_same_project_without_the_bad_input_writes(tmp_path: Path) -> None:
    """The check above can see a write: the good project renders into `out`."""
    root = render_project(tmp_path, "", GOOD_FLEET)
    result = invoke(["render", "--root", str(root), "--stack", "example", "--out",
                     str(root / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (root / "out").glob("[!.]*")) == [
        "agent-0.bu", "agent-0.ign", "control-plane.bu", "control-plane.ign",
        "web-0.bu", "web-0.ign", "web-1.bu", "web-1.ign",
    ]  # fmt: skip


# --- digits of other scripts: Python's \d reads them, Go's strconv and URLs do not -------------
@pytest.mark.parametrize(
    ("schedule", "field"),
    [("٣ * * * *", "minute field '٣'"), ("0 */۶ * * *", "hour field '*/۶'"),
     ("0 0 1-\uff12 * *", "day of month field '1-\uff12'")],
)  # fmt: skip
def test_a_schedule_with_other_digits_is_refused(schedule: str, field: str) -> None:
    assert stack_refusal(backupSchedule=schedule).startswith(
        f"Pulumi.test.yaml: raya:backupSchedule {field}: "
    )


@pytest.mark.parametrize(
    ("name", "read", "document", "field"),
    [
        ("fcos.pin", parse_fcos_pin,
         {"stream": "stable", "version": "٤٤.20260720.3.1", "sha256": "0" * 64}, "version"),
        ("k3s.pin", parse_k3s_pin, {"version": "v1.٣٦.5+k3s1", "sha256": "0" * 64}, "version"),
    ],
)  # fmt: skip
def test_a_pin_with_other_digits_is_refused(
    tmp_path: Path, name: str, read: Reader, document: dict[str, str], field: str
) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(document, ensure_ascii=False))
    with pytest.raises(ConfigError) as refused:
        read(path)
    assert str(refused.value).startswith(
        f"{path}: field '{field}' is {document[field]!r}; accepted: "
    )


@pytest.mark.parametrize(
    ("parent", "fleet", "node"),
    [
        # `cp.raya.` and 246 characters: 254.
        (".".join(["a" * 63] * 3) + "." + "b" * 50 + ".com", {"agents": ["cx23"]},
         "control-plane"),
        # 240 characters of parent: `cp.raya.` fits (248), `webwebwebwebwebwebwe-0.raya.`
        # does not (268).
        (".".join(["b" * 62] * 3) + "." + "c" * 47 + ".com",
         {"agents": ["cx23"], "pools": [web(name="webwebwebwebwebwebwe")]},
         "webwebwebwebwebwebwe-0"),
    ],
)  # fmt: skip
def test_a_node_dns_name_longer_than_dns_allows_is_refused(
    tmp_path: Path, parent: str, fleet: dict[str, Any], node: str
) -> None:
    message = fleet_refusal(tmp_path, fleet, parentZone=parent)
    name = f"{'cp' if node == 'control-plane' else node}.raya.{parent}"
    assert len(name) > 253
    assert message.startswith(
        f"node {node}'s DNS name {name} is {len(name)} characters; accepted: at most 253"
    )


@pytest.mark.parametrize("network", ["10.0.1.0/25", "10.0.1.128/26", "10.0.1.0/30"])
def test_a_network_smaller_than_hetzner_creates_is_refused(network: str) -> None:
    assert stack_refusal(networkRange=network, nodesSubnet=network).startswith(
        f"Pulumi.test.yaml: raya:networkRange is {network}, smaller than Hetzner creates; "
        "accepted: a /24 or larger"
    )


@pytest.mark.parametrize(
    ("key", "text", "json_key"),
    [
        ("backupS3", '{"endpoint": "a.example", "bucket": "abc", "bucket": "abd"}', "bucket"),
        ("sshSources", '["10.0.0.0/8", {"a": 1, "a": 2}]', "a"),
    ],
)
def test_a_key_twice_in_a_settings_json_text_is_refused(key: str, text: str, json_key: str) -> None:
    """A list or mapping as `pulumi config set` stores it: JSON text, read by the program with
    json.loads, which would keep the last of two equal keys."""
    line = stack_refusal(**{key: text})
    assert line.startswith(f"Pulumi.test.yaml: raya:{key} is JSON text: line 1 column ")
    assert line.endswith(f"key {json_key!r} appears twice in one object; accepted: each key once")
