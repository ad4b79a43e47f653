"""Storage rules, one test per rule, each citing where Butane or Ignition states it.

The vectors (tests/butane/vectors, cls-* cases) prove agreement with the real Butane on
instances; these tests pin each rule's edges (both sides of a limit, the exceptions).
"""

from __future__ import annotations

from raya.butane import translate


def _findings(storage: str, version: str = "1.6.0", rest: str = "") -> set[tuple[str, str]]:
    """(severity, JSON path) of every finding for a config with this storage section."""
    text = f"variant: fcos\nversion: {version}\nstorage:\n{storage}{rest}"
    return {(d.severity, d.json_path) for d in translate(text).diagnostics}


def _config(storage: str, version: str = "1.6.0", rest: str = "") -> dict[str, object]:
    result = translate(f"variant: fcos\nversion: {version}\nstorage:\n{storage}{rest}")
    assert result.config is not None, result.diagnostics
    return result.config


DISK = "  disks:\n    - device: /dev/vdb\n      wipe_table: true\n      partitions:\n"
P0 = "$.storage.disks.0.partitions.0"


def _partitions(*items: str) -> str:
    return DISK + "".join(f"        - {item}\n" for item in items)


def test_partition_needs_a_number_or_a_label() -> None:
    # Ignition config/v3_x/types/partition.go Validate: ErrNeedLabelOrNumber.
    assert _findings(_partitions("size_mib: 10")) == {("error", P0)}
    assert _findings(_partitions("{number: 1, size_mib: 10}")) == set()
    assert _findings(_partitions("{label: x, size_mib: 10}")) == set()


def test_partition_that_should_not_exist_takes_no_other_settings() -> None:
    # Ignition partition.go Validate: ErrShouldNotExistWithOthers.
    assert _findings(_partitions("{number: 5, should_exist: false, size_mib: 1}")) == {
        ("error", P0)}
    assert _findings(_partitions("{number: 5, should_exist: false}")) == set()


def test_partition_label_length_and_colon() -> None:
    # Ignition partition.go validateLabel: at most 36 bytes (GPT), no ':' (sgdisk).
    assert _findings(_partitions("{number: 1, label: " + "a" * 36 + "}")) == set()
    assert _findings(_partitions("{number: 1, label: " + "a" * 37 + "}")) == {
        ("error", f"{P0}.label")}
    assert _findings(_partitions('{number: 1, label: "a:b"}')) == {("error", f"{P0}.label")}


def test_partition_guids_are_checked() -> None:
    # Ignition partition.go validateGUID: empty, or 8-4-4-4-12 hex digits.
    good = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
    assert _findings(_partitions(f"{{number: 1, type_guid: {good}, guid: ''}}")) == set()
    assert _findings(_partitions(f"{{number: 1, type_guid: {good[:-1]}, guid: x}}")) == {
        ("error", f"{P0}.type_guid"), ("error", f"{P0}.guid")}


def test_partitions_of_a_disk_collide_overlap_or_share_a_label() -> None:
    # Ignition config/v3_x/types/disk.go Validate: each rule names the later partition;
    # a start of 0 is placed by sgdisk and never overlaps; duplicate keys from validate.go.
    second = "$.storage.disks.0.partitions.1"
    assert _findings(_partitions("{number: 1, start_mib: 1, size_mib: 10}",
                                 "{number: 2, start_mib: 10, size_mib: 10}")) == {
        ("error", second)}
    assert _findings(_partitions("{number: 1, start_mib: 1, size_mib: 10}",
                                 "{number: 2, start_mib: 11, size_mib: 10}")) == set()
    assert _findings(_partitions("{number: 1, start_mib: 0, size_mib: 10}",
                                 "{number: 2, start_mib: 0, size_mib: 10}")) == set()
    assert _findings(_partitions("{number: 1, label: a}", "{number: 2, label: a}")) == {
        ("error", second)}
    assert _findings(_partitions("{number: 3, label: a}", "{number: 3, label: b}")) == {
        ("error", second)}


def test_partition_number_zero_is_not_written() -> None:
    # Ignition's Partition.Number is a plain int with omitempty: Butane never writes 0.
    config = _config(_partitions("{number: 0, label: data}"))
    assert config["storage"] == {"disks": [{"device": "/dev/vdb", "partitions": [
        {"label": "data"}], "wipeTable": True}]}


def test_root_partition_size() -> None:
    # Butane config/fcos/v1_x translate.go (TestRootPartitionConstraints): root needs 8 GiB,
    # and a root filling the disk cannot grow past an auto-placed partition after it.
    root = "{number: 4, label: root, size_mib: %s}"
    assert _findings(_partitions(root % 8191)) == {("warning", f"{P0}.size_mib")}
    assert _findings(_partitions(root % 8192)) == set()
    assert _findings(_partitions(root % 0, "{number: 5, label: var}")) == {
        ("warning", f"{P0}.label")}
    assert _findings(_partitions(root % 0, "{number: 5, label: var, start_mib: 9000}")) == set()


def test_fcos16_partitions_on_other_disks_need_a_number() -> None:
    # Butane config/fcos/v1_6 validate.go: ErrReuseByLabel, except on the boot disk or a
    # disk whose table is wiped; fcos 1.5 has no such rule.
    disk = "  disks:\n    - device: %s\n      partitions:\n        - label: data\n"
    assert _findings(disk % "/dev/vdb") == {("warning", f"{P0}.number")}
    assert _findings(disk % "/dev/vdb", "1.5.0") == set()
    assert _findings(disk % "/dev/disk/by-id/coreos-boot-disk") == set()


def test_filesystem_format_is_needed_with_other_settings() -> None:
    # Ignition config/v3_x/types/filesystem.go validateFormat and validateLabel.
    fs = "  filesystems:\n    - device: /dev/vdb\n"
    assert _findings(fs) == set()
    assert _findings(fs + "      wipe_filesystem: true\n") == {
        ("error", "$.storage.filesystems.0.format")}
    assert _findings(fs + "      label: x\n") == {
        ("error", "$.storage.filesystems.0.format"), ("error", "$.storage.filesystems.0.label")}


def test_filesystem_label_limits_per_format() -> None:
    # Ignition filesystem.go validateLabel: mkfs' limits in bytes.
    fs = "  filesystems:\n    - {device: /dev/vdb, format: %s, label: %s}\n"
    for fs_format, limit in (("ext4", 16), ("xfs", 12), ("swap", 15), ("vfat", 11)):
        assert _findings(fs % (fs_format, "a" * limit)) == set()
        assert _findings(fs % (fs_format, "a" * (limit + 1))) == {
            ("error", "$.storage.filesystems.0.label")}


def test_filesystem_on_a_whole_disk_that_is_partitioned_or_wiped() -> None:
    # Ignition config/v3_x/types/storage.go validateFilesystems.
    fs = "  filesystems:\n    - {device: /dev/vdb, format: xfs%s}\n"
    where = {("warning", "$.storage.filesystems.0.device")}
    assert _findings(_partitions("{number: 1}") + fs % "") == where
    assert _findings("  disks:\n    - {device: /dev/vdb, wipe_table: true}\n" + fs % "") == where
    assert _findings("  disks:\n    - {device: /dev/vdb, wipe_table: true}\n"
                     + fs % ", wipe_filesystem: true") == set()


def test_fcos16_mount_units_only_under_etc_or_var() -> None:
    # Butane config/fcos/v1_6 validate.go: ErrMountPointForbidden.
    fs = "  filesystems:\n    - {device: /dev/vdb, format: xfs, path: %s, with_mount_unit: true}\n"
    assert _findings(fs % "/srv") == {("error", "$.storage.filesystems.0.path")}
    assert _findings(fs % "/variable") == {("error", "$.storage.filesystems.0.path")}
    assert _findings(fs % "/var") == set()
    assert _findings(fs % "/srv", "1.5.0") == set()


def test_luks_rules() -> None:
    # Ignition config/v3_x/types/luks.go, clevis.go and tang.go Validate.
    luks = "  luks:\n    - name: %s\n      device: /dev/vdb\n      clevis: %s\n"
    assert _findings(luks % ("a/b", "{tpm2: true}")) == {("error", "$.storage.luks.0.name")}
    assert _findings("  luks:\n    - name: a\n") == {("error", "$.storage.luks.0.device")}
    assert _findings(luks % ("a", "{custom: {pin: tang, config: '{}'}}")) == set()
    assert _findings(luks % ("a", "{custom: {pin: yubikey}}")) == {
        ("error", "$.storage.luks.0.clevis.custom.pin"),
        ("error", "$.storage.luks.0.clevis.custom.config")}
    assert _findings(luks % ("a", "{custom: {pin: tpm2, config: x}, tpm2: true}")) == {
        ("error", "$.storage.luks.0.clevis")}
    tang = "{tang: [{url: %s, thumbprint: %s, advertisement: '%s'}]}"
    assert _findings(luks % ("a", tang % ("https://t", "x", '{"a": 1}'))) == set()
    assert _findings(luks % ("a", tang % ("t.example", "''", "{"))) == {
        ("error", "$.storage.luks.0.clevis.tang.0.url"),
        ("error", "$.storage.luks.0.clevis.tang.0.thumbprint"),
        ("error", "$.storage.luks.0.clevis.tang.0.advertisement")}


def test_raid_rules() -> None:
    # Ignition config/v3_x/types/raid.go Validate.
    raid = "  raid:\n    - {name: md0, devices: %s%s}\n"
    assert _findings(raid % ("[/dev/vdb]", ", level: raid1, spares: 1")) == set()
    assert _findings(raid % ("[/dev/vdb]", ", level: stripe, spares: 1")) == {
        ("error", "$.storage.raid.0.level")}
    assert _findings(raid % ("[/dev/vdb]", ", level: raid7")) == {
        ("error", "$.storage.raid.0.level")}
    assert _findings(raid % ("[]", "")) == {
        ("error", "$.storage.raid.0.level"), ("error", "$.storage.raid.0.devices")}


def test_hard_links() -> None:
    # Ignition storage.go validateLinks: not to a directory (a relative target is joined to
    # the link's own path, as Ignition does); an owner given for a hard link is ignored.
    base = "  directories:\n    - path: /d\n  links:\n    - {path: /l, target: %s, hard: %s%s}\n"
    assert _findings(base % ("/d", "true", "")) == {("error", "$.storage.links.0")}
    assert _findings(base % ("/d", "false", "")) == set()
    assert _findings(base % ("../d", "true", "")) == {("error", "$.storage.links.0")}
    assert _findings(base % ("/f", "true", ", user: {id: 0}, group: {name: g}")) == {
        ("warning", "$.storage.links.0.user.id"), ("warning", "$.storage.links.0.group.name")}


def test_a_file_and_a_directory_at_one_path_name_the_file() -> None:
    # Ignition config/validate/validate.go ValidateDups walks Storage's fields in order
    # (Directories, Files, Links share one key space): the later kind is the duplicate.
    nodes = "  files:\n    - path: /p\n  directories:\n    - path: /p\n"
    assert _findings(nodes) == {("error", "$.storage.files.0")}


def test_ignition_findings_wait_for_butane_ones() -> None:
    # Butane config/util Translate: the generated config is validated only when the Butane
    # config and its translation had no error, so Ignition's findings are not reported then.
    bad_partition = _partitions("size_mib: 10")
    bad_source = "  files:\n    - path: /f\n      contents: {inline: a, local: b}\n"
    both = _findings(bad_partition + bad_source)
    assert ("error", P0) not in both
    # Butane base/v0_x validate.go Resource.Validate: two sources are reported at the last
    # one set, in the order local, inline, source.
    assert ("error", "$.storage.files.0.contents.inline") in both
    assert _findings(bad_partition) == {("error", P0)}


def test_every_ignition_list_is_checked_for_duplicates() -> None:
    # Ignition config/validate/validate.go ValidateDups: lists of strings by value, lists of
    # objects by Key() (resources by source, partitions by number or label, Tang by URL).
    found = _findings(
        "  raid:\n    - {name: md0, level: raid1, devices: [/dev/vdb, /dev/vdb]}\n"
        "  luks:\n    - name: l\n      device: /dev/vdc\n      clevis:\n        tang:\n"
        "          - {url: 'https://t', thumbprint: x}\n"
        "          - {url: 'https://t', thumbprint: y}\n",
        rest="ignition:\n  proxy:\n    no_proxy: [a, b, a]\n  config:\n    merge:\n"
        "      - source: https://c\n      - source: https://c\n"
        "passwd:\n  users:\n    - name: core\n      groups: [wheel, wheel]\n"
        "      ssh_authorized_keys: [k, k]\n")
    assert found == {
        ("error", "$.storage.raid.0.devices.1"), ("error", "$.storage.luks.0.clevis.tang.1"),
        ("error", "$.ignition.proxy.no_proxy.2"), ("error", "$.ignition.config.merge.1"),
        ("error", "$.passwd.users.0.groups.1"),
        ("error", "$.passwd.users.0.ssh_authorized_keys.1")}
    assert _findings(_partitions("{number: 1, label: a}", "{number: 1, label: b}")) == {
        ("error", "$.storage.disks.0.partitions.1")}  # and: numbers collide, same path
