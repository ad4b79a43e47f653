"""Butane semantics beyond the vectors: typing, sugar, validation, diagnostics."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from raya.butane import ButaneDiagnostics, translate, transpile
from raya.butane.units import escape_path
from raya.errors import ButaneError
from tests.butane.helpers import decoded
from tests.support import require_tool

# Tests named after Butane's behaviour cite the vector (tests/butane/vectors) that shows it.


def config(body: str, version: str = "1.4.0", files_dir: Path | None = None) -> Any:
    return json.loads(transpile(f"variant: fcos\nversion: {version}\n{body}", files_dir))


def findings(body: str, version: str = "1.4.0", files_dir: Path | None = None,
             ) -> list[tuple[str, int, int]]:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(f"variant: fcos\nversion: {version}\n{body}", files_dir)
    return [(path, line, column) for path, line, column, _ in caught.value.diagnostics]


def message(body: str, version: str = "1.4.0", files_dir: Path | None = None) -> str:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(f"variant: fcos\nversion: {version}\n{body}", files_dir)
    return str(caught.value)


# -- versions and variants ------------------------------------------------------------


@pytest.mark.parametrize(("version", "ignition"),
                         [("1.4.0", "3.3.0"), ("1.5.0", "3.4.0"), ("1.6.0", "3.5.0")])
def test_versions_map_to_ignition_specs(version: str, ignition: str) -> None:
    assert config("", version) == {"ignition": {"version": ignition}}


@pytest.mark.parametrize("head", ["variant: flatcar\nversion: 1.0.0",
                                  "variant: fcos\nversion: 1.3.0", "version: 1.4.0",
                                  "variant: fcos"])
def test_other_variants_and_versions_are_refused_naming_the_supported_ones(head: str) -> None:
    with pytest.raises(ButaneError) as caught:
        transpile(head + "\n")
    assert "fcos" in str(caught.value)
    assert "1.3.0" not in head or "1.4.0, 1.5.0, 1.6.0" in str(caught.value)


def test_yaml_syntax_error_has_a_position() -> None:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile("variant: fcos\nversion: 1.4.0\nstorage: [\n")
    assert caught.value.diagnostics[0][1] >= 3


def test_a_non_mapping_document_is_refused() -> None:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile("- just\n- a list\n")
    message = "a Butane config must be a mapping, not a list"
    assert caught.value.diagnostics == [("$", 1, 1, message)]


# -- YAML typing as go-yaml does it ---------------------------------------------------------


@pytest.mark.parametrize(("written", "mode"), [("0644", 420), ("0o644", 420), ("420", 420),
                                              ("0600", 384), ("0x1a4", 420), ("0_644", 420)])
def test_modes_are_read_like_go_yaml(written: str, mode: int) -> None:
    out = config(f"storage:\n  files:\n    - path: /etc/a\n      mode: {written}\n")
    assert out["storage"]["files"][0]["mode"] == mode


def test_quoted_numbers_and_true_false_are_strings_and_refused() -> None:
    # go-yaml stops at such a value, naming only its line; raya names the field in the message.
    assert findings('storage:\n  files:\n    - path: /etc/a\n      mode: "0644"\n'
                    "      overwrite: 'true'\n") == [("$", 6, 13), ("$", 7, 18)]
    assert "$.storage.files.0.mode: expected an integer" in message(
        'storage:\n  files:\n    - path: /etc/a\n      mode: "0644"\n')


def test_yaml_1_1_booleans_are_accepted_for_boolean_fields() -> None:
    out = config("systemd:\n  units:\n    - name: a.service\n      enabled: yes\n"
                 "    - name: b.service\n      mask: off\n")
    assert out["systemd"]["units"] == [{"enabled": True, "name": "a.service"},
                                       {"mask": False, "name": "b.service"}]


def test_numbers_in_string_fields_stay_as_written() -> None:
    out = config("passwd:\n  users:\n    - name: 0123\n      gecos: 1e3\n")
    assert out["passwd"]["users"] == [{"gecos": "1e3", "name": "0123"}]


def test_null_scalars_and_empty_lists_leave_fields_unset() -> None:
    # Butane: gen-1663 (`local:` with no value gives a file without contents),
    # gen-6136 (`users: []` gives no users).
    out = config("storage:\n  files:\n    - path: /etc/a\n      contents:\n        local:\n"
                 "      mode: ~\npasswd:\n  users:\n    - name: core\n"
                 "      ssh_authorized_keys: []\n")
    assert out["storage"]["files"] == [{"path": "/etc/a"}]
    assert out["passwd"]["users"] == [{"name": "core"}]


def test_null_list_items_are_dropped() -> None:
    # Butane: cls-null-list-item-1..3 drop every null entry of a list of strings.
    out = config("kernel_arguments:\n  should_exist: [a, null, b]\n", "1.6.0")
    assert out["kernelArguments"] == {"shouldExist": ["a", "b"]}


def test_a_null_object_is_a_warning_that_strict_mode_refuses() -> None:
    # Butane's struct fields are values (base/v0_x/schema.go), so its unused-key pass
    # (Ignition's config/validate ValidateUnusedKeys, run by Butane's TranslateBytes) visits
    # a null `contents:` and warns "context tree does not match content tree" at its path.
    # The real Butane --strict refused this config (issue 15's audit).
    body = "storage:\n  files:\n    - path: /etc/a\n      contents:\n"
    # The empty value sits right after its colon: libyaml's (and go-yaml's port of its)
    # parse_block_mapping_value marks an empty scalar at the `:` token's end.
    assert findings(body) == [("$.storage.files.0.contents", 6, 16)]
    text = f"variant: fcos\nversion: 1.4.0\n{body}"
    assert json.loads(transpile(text, strict=False))["storage"]["files"] == [{"path": "/etc/a"}]
    for nested, path in (("ignition:\n  proxy: ~\n", "$.ignition.proxy"),
                         ("storage:\n  directories:\n    - path: /d\n      user: null\n",
                          "$.storage.directories.0.user")):
        assert [found for found, _, _ in findings(nested)] == [path]
    # go-yaml drops a null list item, so the Go list is shorter and Butane checks Go element
    # j against YAML item j: a null item with a struct after it is where a mapping belongs.
    assert findings("storage:\n  files:\n    - ~\n    - path: /etc/a\n") == [
        ("$.storage.files.0", 5, 7)]
    assert findings("storage:\n  files: [{path: /a}, ~, ~, {path: /b}, ~]\n") == [
        ("$.storage.files.1", 4, 23)]
    # A null list (a Go slice, not a struct), trailing null items, nulls among strings:
    # nothing to report.
    for quiet in ("passwd:\n  users:\n    - name: a\n      groups: [~, wheel]\n",
                  "storage:\n  files: ~\n", "storage:\n  files: [~]\n",
                  "storage:\n  files: [{path: /a}, ~]\n"):
        transpile(f"variant: fcos\nversion: 1.4.0\n{quiet}")


def test_duplicate_mapping_keys_are_errors() -> None:
    # go-yaml v3 decode.go `mapping`: "mapping key ... already defined", a line and no path.
    assert findings("storage:\n  files:\n    - path: /etc/a\n      path: /etc/b\n") == [
        ("$", 6, 7)]


# -- strictness and reporting ---------------------------------------------------------------


def test_unused_keys_are_warnings_that_strict_mode_refuses() -> None:
    body = "storage:\n  files:\n    - path: /etc/a\n      mdoe: 0644\n"
    assert findings(body) == [("$.storage.files.0.mdoe", 6, 7)]
    text = f"variant: fcos\nversion: 1.4.0\n{body}"
    assert json.loads(transpile(text, strict=False))["storage"]["files"] == [{"path": "/etc/a"}]
    result = translate(text)
    assert [d.severity for d in result.diagnostics] == ["warning"]


def test_keys_of_later_versions_are_unused_in_earlier_ones() -> None:
    body = "systemd:\n  units:\n    - name: a.service\n      contents_local: a.service\n"
    assert findings(body, "1.4.0") == [("$.systemd.units.0.contents_local", 6, 7)]


def test_unsupported_fcos_features_are_named() -> None:
    body = "boot_device:\n  mirror:\n    devices: [/dev/sda]\n"
    assert "boot_device is not supported" in message(body)


def test_every_problem_is_reported_in_one_run() -> None:
    got = findings(
        "storage:\n"
        "  files:\n"
        "    - path: relative\n"          # 5: not absolute
        "      mode: 99999\n"              # 6: illegal mode
        "      contents:\n"
        "        compression: gzip\n"
        "        source: ftp://x\n"        # 9: no such scheme
        "  links:\n"
        "    - path: /etc/l\n"             # 11: no target
        "systemd:\n"
        "  units:\n"
        "    - name: nosuffix\n"           # 14: bad extension
        "      dropins:\n"
        "        - name: x.txt\n"          # 16: bad drop-in extension
        "passwd:\n"
        "  users:\n"
        "    - name: a\n"
        "      uid: -1\n"                  # 20: negative id
        "    - name: a\n"                  # 21: duplicate user
    )
    assert got == [
        ("$.storage.files.0.path", 5, 13),
        ("$.storage.files.0.mode", 6, 13),
        ("$.storage.files.0.mode", 6, 13),  # 99999 has setgid and sticky bits too
        ("$.storage.files.0.contents.source", 9, 17),
        ("$.storage.links.0.target", 11, 7),
        ("$.systemd.units.0.name", 14, 13),
        ("$.systemd.units.0.dropins.0.name", 16, 17),
        ("$.passwd.users.0.uid", 20, 12),
        ("$.passwd.users.1", 21, 7),
    ]


def test_messages_say_what_is_accepted() -> None:
    text = message("systemd:\n  units:\n    - name: k3s\n")
    assert ".service" in text and ".timer" in text
    assert "07777" in message("storage:\n  directories:\n    - path: /a\n      mode: 70000\n")


def test_duplicate_paths_across_files_directories_and_links() -> None:
    # Butane: cls-file-dir-same-path-3 (the directory comes first; the link is the duplicate).
    assert findings("storage:\n  directories:\n    - path: /etc/x\n"
                    "  links:\n    - path: /etc/x\n      target: /y\n") == [
        ("$.storage.links.0", 7, 7)]


def test_a_file_and_a_directory_at_one_path_name_the_file() -> None:
    # Butane: cls-file-dir-same-path-1..4 name the file, not the directory.
    assert findings("storage:\n  files:\n    - path: /etc/x\n"
                    "  directories:\n    - path: /etc/x\n") == [("$.storage.files.0", 5, 7)]


def test_decimal_looking_mode_warns_twice() -> None:
    # Butane: gen-1291 (`mode: 644`, fcos 1.6) and gen-5383 (`mode: 755`) report two
    # warnings at the mode: "specified in octal?" and, since decimal 644 is 0o1204 (sticky),
    # "setuid/setgid/sticky bits are not supported ... older than 3.6.0".
    assert findings("storage:\n  files:\n    - path: /a\n      mode: 644\n") == [
        ("$.storage.files.0.mode", 6, 13), ("$.storage.files.0.mode", 6, 13)]


def test_decimal_looking_mode_is_a_warning() -> None:
    # Butane: gen-1291, gen-5383 (the first of the two warnings above).
    text = "variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /a\n      mode: 644\n"
    warnings = translate(text).diagnostics
    first = warnings[0]
    assert (first.json_path, first.severity) == ("$.storage.files.0.mode", "warning")
    assert "octal" in first.message


def test_ignition_rules_on_files_and_owners() -> None:
    assert findings("storage:\n  files:\n    - path: /a\n      overwrite: true\n"
                    "      user:\n        id: 1\n        name: core\n") == [
        ("$.storage.files.0.overwrite", 6, 18), ("$.storage.files.0.user", 8, 9)]


def test_kernel_argument_cannot_both_exist_and_not_exist() -> None:
    assert findings("kernel_arguments:\n  should_exist: [a]\n  should_not_exist: [a]\n") == [
        ("$.kernel_arguments.should_not_exist.0", 5, 22)]


def test_resource_checks() -> None:
    got = findings("storage:\n  files:\n"
                   "    - path: /a\n      contents:\n        source: ftp://x\n"
                   "    - path: /b\n      contents:\n        source: https://x\n"
                   "        compression: zstd\n        verification:\n          hash: md5-00\n")
    assert got == [("$.storage.files.0.contents.source", 7, 17),
                   ("$.storage.files.1.contents.compression", 11, 22),
                   ("$.storage.files.1.contents.verification.hash", 13, 17)]


def test_install_section_warning_only_for_enabled_units_with_contents() -> None:
    assert config("systemd:\n  units:\n    - name: a.service\n      enabled: true\n")
    assert findings("systemd:\n  units:\n    - name: a.service\n      enabled: true\n"
                    "      contents: \"[Service]\\nExecStart=/bin/true\\n\"\n") == [
        ("$.systemd.units.0.contents", 7, 17)]


def test_unit_contents_that_systemd_cannot_parse() -> None:
    assert findings("systemd:\n  units:\n    - name: a.service\n"
                    "      contents: \"[Service\\n\"\n") == [("$.systemd.units.0.contents", 6, 17)]


# -- contents and files ------------------------------------------------------------------------


def test_user_compression_is_kept_and_not_applied_twice() -> None:
    body = ("storage:\n  files:\n    - path: /a\n      contents:\n        compression: gzip\n"
            "        inline: " + "x" * 500 + "\n")
    contents = config(body)["storage"]["files"][0]["contents"]
    assert contents["compression"] == "gzip"
    assert contents["source"].startswith("data:,xxx")  # encoded as given, not re-gzipped


def test_local_files_and_escapes(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"\x00\x01binary")
    body = "storage:\n  files:\n    - path: /a\n      contents:\n        local: {}\n"
    out = config(body.format("/f.txt"), files_dir=tmp_path)  # leading / stays inside
    assert decoded(out)["storage"]["files"][0]["contents"]["source"] == b"\x00\x01binary"
    assert "traverses outside the files directory" in message(body.format("../etc/passwd"),
                                                              files_dir=tmp_path)
    assert "--files-dir" in message(body.format("f.txt"))


def test_contents_local_for_units_and_dropins(tmp_path: Path) -> None:
    (tmp_path / "u.service").write_text("[Service]\nExecStart=/bin/true\n")
    (tmp_path / "d.conf").write_text("[Service]\nNice=5\n")
    out = config("systemd:\n  units:\n    - name: u.service\n      contents_local: u.service\n"
                 "      dropins:\n        - name: d.conf\n          contents_local: d.conf\n",
                 "1.5.0", tmp_path)
    assert out["systemd"]["units"] == [{
        "contents": "[Service]\nExecStart=/bin/true\n",
        "dropins": [{"contents": "[Service]\nNice=5\n", "name": "d.conf"}],
        "name": "u.service"}]


def test_ssh_authorized_keys_local(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text("ssh-ed25519 AAAA a\r\n\nssh-rsa BBBB b\n")
    out = config("passwd:\n  users:\n    - name: core\n      ssh_authorized_keys: [k0]\n"
                 "      ssh_authorized_keys_local: [keys]\n", "1.5.0", tmp_path)
    assert out["passwd"]["users"][0]["sshAuthorizedKeys"] == [
        "k0", "ssh-ed25519 AAAA a", "ssh-rsa BBBB b"]


def test_trees_fill_existing_entries_and_refuse_conflicts(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a").write_text("a\n")
    out = config("storage:\n  files:\n    - path: /etc/a\n      mode: 0600\n"
                 "  trees:\n    - local: t\n      path: /etc\n", files_dir=tmp_path)
    assert decoded(out)["storage"]["files"] == [
        {"path": "/etc/a", "contents": {"compression": "", "source": b"a\n"}, "mode": 384}]
    assert findings("storage:\n  directories:\n    - path: /etc/a\n"
                    "  trees:\n    - local: t\n      path: /etc\n", files_dir=tmp_path) == [
        ("$.storage.trees.0", 7, 7)]
    assert findings("storage:\n  trees:\n    - path: /x\n", files_dir=tmp_path) == [
        ("$.storage.trees.0", 5, 7)]


def test_tree_modes_follow_the_executable_bit(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "run").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "t" / "run", 0o700)
    (tmp_path / "t" / "data").write_text("x\n")
    os.chmod(tmp_path / "t" / "data", 0o600)
    out = config("storage:\n  trees:\n    - local: t\n", files_dir=tmp_path)
    assert {f["path"]: f["mode"] for f in out["storage"]["files"]} == {
        "/data": 0o644, "/run": 0o755}


# -- mount units -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/var/lib/data", "/srv/my-data", "/mnt/a b", "/.hidden/x", "/"])
def test_unit_names_escape_like_systemd(path: str) -> None:
    tool = require_tool("systemd-escape")
    expected = subprocess.run([tool, "--path", path], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert escape_path(path) == expected


def test_unit_names_escape_bytes_below_0x10_with_one_digit_like_butane() -> None:
    # Butane (config/util, fmt "\\x%x") writes `\x9` where `systemd-escape` writes `\x09`;
    # raya follows Butane so that the unit names match (docs/butane.md).
    assert escape_path("/var/a\tb") == "var-a\\x9b"
    assert escape_path("/var/a\x1bb") == "var-a\\x1bb"


@pytest.mark.parametrize("version", ["1.4.0", "1.5.0", "1.6.0"])
def test_mount_units_are_alike_in_every_version(version: str) -> None:
    # Butane v0.29 writes fcos 1.4's mount units like 1.5's: no Before= ordering, and
    # `_netdev` for a filesystem on a LUKS volume unlocked by Tang (vectors cls-fcos14-*).
    body = ("storage:\n  luks:\n    - name: v\n      device: /dev/vdb\n      clevis:\n"
            "        tang: [{url: 'https://t', thumbprint: x}]\n  filesystems:\n"
            "    - {device: /dev/mapper/v, path: /var/v, format: ext4, with_mount_unit: true}\n")
    unit = config(body, version)["systemd"]["units"][0]
    assert unit["contents"].startswith("# Generated by Butane\n[Unit]\nRequires=")
    assert "Options=_netdev\n" in unit["contents"]
    assert unit["contents"].endswith("RequiredBy=remote-fs.target")


def test_user_contents_for_a_mount_unit_need_an_install_section() -> None:
    # Ignition validates the merged unit: Butane's unit is enabled, so user contents
    # without [Install] warn at the user's contents (vectors cls-mount-unit-override-*).
    body = ("storage:\n  filesystems:\n    - {device: /dev/vdb, path: /var/srv, format: ext4,"
            " with_mount_unit: true}\nsystemd:\n  units:\n    - name: var-srv.mount\n"
            "      contents: \"[Mount]\\nWhat=/dev/vdb\\n\"\n")
    assert [path for path, *_ in findings(body)] == ["$.systemd.units.0.contents"]
    fixed = config(body.replace("[Mount]", "[Install]\\nWantedBy=x\\n[Mount]"))
    assert fixed["systemd"]["units"][0]["enabled"] is True


def test_mount_unit_is_generated_and_merged_with_a_user_unit() -> None:
    body = ("storage:\n  filesystems:\n    - device: /dev/vdb\n      path: /var/srv\n"
            "      format: ext4\n      with_mount_unit: true\n    - device: /dev/vdc\n"
            "      format: swap\n      with_mount_unit: true\n"
            "systemd:\n  units:\n    - name: var-srv.mount\n      dropins:\n"
            "        - name: x.conf\n          contents: \"[Mount]\\n\"\n")
    units = config(body, "1.6.0")["systemd"]["units"]
    assert [u["name"] for u in units] == ["var-srv.mount", "dev-vdc.swap"]
    assert units[0]["contents"] == (
        "# Generated by Butane\n[Unit]\nRequires=systemd-fsck@dev-vdb.service\n"
        "After=systemd-fsck@dev-vdb.service\n\n[Mount]\nWhere=/var/srv\nWhat=/dev/vdb\n"
        "Type=ext4\n\n[Install]\nRequiredBy=local-fs.target")
    assert units[0]["dropins"] == [{"contents": "[Mount]\n", "name": "x.conf"}]
    assert units[1]["contents"] == ("# Generated by Butane\n[Swap]\nWhat=/dev/vdc\n\n"
                                    "[Install]\nRequiredBy=swap.target")
    assert findings("storage:\n  filesystems:\n    - device: /dev/vdb\n"
                    "      with_mount_unit: true\n") == [("$.storage.filesystems.0.format", 5, 7)]


# -- output --------------------------------------------------------------------------------------


def test_output_is_compact_by_default_pretty_on_request_and_deterministic() -> None:
    text = ("variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /a\n"
            "      contents:\n        inline: " + "<a&b> " * 100 + "\n")
    compact = transpile(text)
    assert "\n" not in compact and compact == transpile(text)
    pretty = transpile(text, pretty=True)
    assert pretty.startswith('{\n  "ignition": {\n    "version": "3.3.0"\n  },')
    assert json.loads(pretty) == json.loads(compact)


def test_go_style_escaping_of_html_characters() -> None:
    out = transpile("variant: fcos\nversion: 1.4.0\nsystemd:\n  units:\n"
                    "    - name: a.service\n      contents: \"[Unit]\\nX=a<b>&c\\n\"\n")
    assert "X=a\\u003cb\\u003e\\u0026c\\n" in out


def test_yaml_anchors_and_aliases_work_like_go_yaml() -> None:
    # Butane: gen-0986 (`mode: &m0 0755` then `mode: *m0`: both files get 493).
    out = config("storage:\n  files:\n    - path: /etc/a\n      mode: &m 0600\n"
                 "    - path: /etc/b\n      mode: *m\n")
    assert out["storage"]["files"] == [{"path": "/etc/a", "mode": 384},
                                       {"path": "/etc/b", "mode": 384}]


def test_yaml_merge_keys_are_unused_keys_like_butane() -> None:
    # Butane: cls-yaml-merge-key-1..3 (`<<: *base` is "unused key <<", refused by --strict).
    assert findings("storage:\n  files:\n    - &base\n      path: /etc/a\n      mode: 0600\n"
                    "    - <<: *base\n      path: /etc/b\n") == [("$.storage.files.1.<<", 8, 7)]


def test_paths_must_be_clean_the_way_go_cleans_them() -> None:
    assert findings("storage:\n  directories:\n    - path: //etc/x\n    - path: /etc/../x\n") == [
        ("$.storage.directories.0.path", 5, 13), ("$.storage.directories.1.path", 6, 13)]


def test_reserved_partition_labels_warn_unless_the_table_is_wiped() -> None:
    body = ("storage:\n  disks:\n    - device: /dev/sda\n{wipe}      partitions:\n"
            "        - label: root\n          number: 5\n")
    assert findings(body.format(wipe="")) == [("$.storage.disks.0.partitions.0.label", 7, 18)]
    assert config(body.format(wipe="      wipe_table: true\n"))


TEMPLATE_WITHOUT_INSTALL = ("systemd:\n  units:\n    - name: a@.service\n"
                            "      contents: \"[Service]\\nExecStart=/bin/true\\n\"\n"
                            "    - name: a@x.service\n      enabled: true\n")


@pytest.mark.parametrize("version", ["1.5.0", "1.6.0"])
def test_enabled_instance_of_a_template_without_install_warns(version: str) -> None:
    assert findings(TEMPLATE_WITHOUT_INSTALL, version) == [("$.systemd.units.1.contents", 7, 7)]


def test_template_without_install_warns_at_fcos_1_4_too() -> None:
    # Butane: cls-fcos14-template-unit-1..3 (fcos 1.4.0, Ignition 3.3.0) warn as well.
    assert findings(TEMPLATE_WITHOUT_INSTALL, "1.4.0") == [("$.systemd.units.1.contents", 7, 7)]


def test_files_may_not_take_the_place_of_units_or_dropins() -> None:
    assert findings("storage:\n  files:\n    - path: /etc/systemd/system/a.service.d/x.conf\n"
                    "systemd:\n  units:\n    - name: a.service\n      dropins:\n"
                    "        - name: x.conf\n          contents: \"[Service]\\n\"\n") == [
        ("$.storage.files.0.path", 5, 13)]


def test_proxies_must_be_http_urls() -> None:
    assert findings("ignition:\n  proxy:\n    https_proxy: socks5://x:1080\n") == [
        ("$.ignition.proxy.https_proxy", 5, 18)]


def test_control_characters_are_escaped_like_butanes_json_encoder() -> None:
    from raya.butane import to_json

    for value in ["a\bb\fc", "x\\b", "x\\\bq", "\\\\f"]:
        out = to_json({"k": value})
        assert json.loads(out) == {"k": value}
        assert "\\b" not in out.replace("\\\\", "") and "\\f" not in out.replace("\\\\", "")


def test_butane_stops_at_the_first_stage_with_an_error() -> None:
    # config/common TranslateBytes: Butane's own checks, then translation (local files,
    # trees), then Ignition's checks; an error in one stage hides the later stages.
    body = ("storage:\n  files:\n    - path: relative\n      contents:\n"
            "        inline: a\n        source: https://x\n")
    assert findings(body) == [("$.storage.files.0.contents.source", 8, 17)]
    body = ("storage:\n  files:\n    - path: relative\n      contents:\n"
            "        local: missing\n")
    assert findings(body, files_dir=Path("/nonexistent")) == [
        ("$.storage.files.0.contents.local", 7, 16)]


def test_with_mount_unit_checks_are_butanes_own_stage() -> None:
    # base/v0_x Filesystem.Validate runs before Ignition's checks: a filesystem missing its
    # mount path hides the duplicate device Ignition would report.
    body = ("storage:\n  filesystems:\n    - device: /dev/vdb\n      format: ext4\n"
            "    - device: /dev/vdb\n      format: ext4\n      with_mount_unit: true\n")
    assert [path for path, _, _ in findings(body)] == ["$.storage.filesystems.1.path"]
