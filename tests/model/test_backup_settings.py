"""The backup settings: the schedule (a cron spec as k3s' robfig/cron reads it), the
retention, and an existing S3 bucket."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest

from raya.errors import ConfigError
from raya.model.config import BackupS3, parse_stack_config
from raya.model.cron import CronError, Schedule

MINIMAL = {
    "authorizedUsers": ["octo-alice"],
    "managedSubdomain": "raya",
    "parentZone": "example.com",
    "acmeEmail": "ops@example.org",
}


def parse(**changes: Any) -> Any:
    return parse_stack_config({**MINIMAL, **changes}, "Pulumi.test.yaml")


def refused(**changes: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(**changes)
    return str(caught.value)


@pytest.mark.parametrize(
    ("spec", "hours"),
    [
        ("0 */6 * * *", 6),
        ("0 */12 * * *", 12),
        ("*/15 * * * *", 0.25),
        ("0 3,9 * * *", 18),  # 09:00 to the next day's 03:00
        ("30 2 * * 1-5", 72),  # Friday 02:30 to Monday 02:30
        ("@daily", 24),
        ("@hourly", 1),
        ("@weekly", 168),
        ("0 0 1 * *", 31 * 24),  # the longest month
        ("0 0 1 1 *", 366 * 24),  # across 2024, a leap year
        # Both day fields restricted: either matches (robfig/cron's dayMatches).
        ("0 0 1 * 0", 7 * 24),
    ],
)
def test_the_longest_gap_between_snapshots(spec: str, hours: float) -> None:
    assert Schedule(spec).longest_gap() == datetime.timedelta(hours=hours)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0 */6 * *", "has 4 fields; accepted: 5"),
        ("61 * * * *", "minute field '61': accepted values are 0-59"),
        ("0 24 * * *", "hour field '24': accepted values are 0-23"),
        ("0 0 * * 7", "day of week field '7': accepted values are 0-6"),
        ("0 0 * JAN *", "'JAN' is not *, N, N-M or one of them with a /step"),
        ("*/0 * * * *", "a step of 0"),
        ("@every 6h", "has 2 fields"),
        ("0 0 31 2 *", "fires at most once in two years"),
        ("0 0 29 2 *", "fires at most once in two years"),
    ],
)
def test_schedules_k3s_would_refuse_or_that_hardly_fire(spec: str, message: str) -> None:
    with pytest.raises(CronError, match=re.escape(message)):
        Schedule(spec).longest_gap()


def test_defaults_are_every_six_hours_and_a_week_of_snapshots() -> None:
    config = parse()
    assert config.backup_schedule == "0 */6 * * *"
    assert config.backup_retention == 28
    assert config.backup_s3 is None


def test_a_bad_schedule_names_the_setting_and_k3s() -> None:
    assert refused(backupSchedule="0 */6 * *") == (
        "Pulumi.test.yaml: raya:backupSchedule '0 */6 * *' has 4 fields; accepted: 5 (minute "
        "hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, "
        "@daily, @midnight, @hourly (k3s' etcd-snapshot-schedule-cron)"
    )


@pytest.mark.parametrize(("value", "kept"), [(1, 1), ("56", 56), (1000, 1000)])
def test_retention(value: Any, kept: int) -> None:
    assert parse(backupRetention=value).backup_retention == kept


@pytest.mark.parametrize("value", [0, 1001, -3, True, "many", 2.5])
def test_retention_out_of_range(value: Any) -> None:
    assert refused(backupRetention=value) == (
        f"Pulumi.test.yaml: raya:backupRetention is {value!r}; accepted: a whole number of "
        "snapshots from 1 to 1000"
    )


@pytest.mark.parametrize(("control_planes", "least"), [(1, 1), (3, 5), (5, 9)])
def test_retention_covers_a_run_of_every_control_plane(control_planes: int, least: int) -> None:
    """k3s prunes the bucket across every control plane after each upload: the retention must
    hold a whole run of the schedule (one per control plane) and all but one of the next."""
    assert parse(controlPlanes=control_planes, backupRetention=least).backup_retention == least
    if least > 1:
        assert refused(controlPlanes=control_planes, backupRetention=least - 1) == (
            f"Pulumi.test.yaml: raya:backupRetention is {least - 1} with {control_planes} "
            f"control planes; accepted: at least {least} (2 x {control_planes} - 1): k3s keeps "
            "that many scheduled snapshots in the bucket for the whole cluster, pruning after "
            "each upload, and each run of the schedule uploads one per control plane, so fewer "
            "would leave a control plane without one while a run uploads (docs/backups.md)"
        )


def test_an_existing_bucket() -> None:
    given = {"endpoint": "fsn1.your-objectstorage.com", "bucket": "team-backups"}
    assert parse(backupS3=given).backup_s3 == BackupS3(
        endpoint="fsn1.your-objectstorage.com", bucket="team-backups", region="us-east-1",
        folder="raya",
    )  # fmt: skip
    full = {**given, "region": "fsn1", "folder": "prod-1", "endpoint": "minio.lan:9000"}
    assert parse(backupS3=full).backup_s3 == BackupS3("minio.lan:9000", "team-backups", "fsn1",
                                                      "prod-1")  # fmt: skip


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("s3://team-backups", "is 's3://team-backups'; accepted: a mapping"),
        ({"bucket": "b-1"}, "backupS3 field 'endpoint' is required"),
        (
            {"endpoint": "h", "bucket": "b-1", "prefix": "x"},
            "backupS3 field 'prefix' is not a known field; accepted: endpoint, bucket, region, "
            "folder",
        ),
        ({"endpoint": "https://h.example", "bucket": "b-1"}, "endpoint is 'https://h.example'"),
        ({"endpoint": "h", "bucket": "Team_Backups"}, "bucket is 'Team_Backups'"),
        ({"endpoint": "h", "bucket": "b-1", "folder": "a/b"}, "folder is 'a/b'"),
    ],
)
def test_bad_existing_buckets(value: Any, message: str) -> None:
    assert message in refused(backupS3=value)


def test_the_keys_are_secret_settings_the_stack_file_may_hold() -> None:
    secure = {"secure": "v1:AAAA"}
    config = parse(backupS3AccessKey=secure, backupS3SecretKey=secure)
    assert config.backup_s3 is None
