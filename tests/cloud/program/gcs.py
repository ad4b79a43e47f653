"""A model of Google Cloud Storage's buckets as the gcp provider (pulumi-gcp, a bridge of
hashicorp/terraform-provider-google) creates, reads and deletes them.

Written from the API and the provider, not from what raya expects:
- A bucket's name is global and taken while the bucket exists: creating one of an existing
  name is refused with 409 Conflict (Cloud Storage docs, "Bucket naming": "bucket names
  must be unique across all of Cloud Storage"; JSON API `buckets.insert`, 409 "Your previous
  request to create the named bucket succeeded and you already own it." for one's own).
- Import (`pulumi import`, the `import_` option) reads the bucket by its id, `name` or
  `project/name` (terraform-provider-google `services/storage/resource_storage_bucket.go`,
  `resourceStorageBucketStateImporter`), then `resourceStorageBucketRead`: the bucket's own
  settings and its project. `force_destroy` is no property of the bucket but of the
  provider's state, and the importer sets it to false. A bucket that does not exist reads
  as nothing, which the engine reports as "resource '<id>' does not exist"
  (pulumi/pulumi `pkg/resource/deploy/step.go`, `ImportStep.Apply`).
- Delete removes the bucket (with `force_destroy`, its objects first; no objects are
  modelled here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.cloud.program.mocks import PROJECT


class StorageError(Exception):
    """An API error, as the provider reports it."""


@dataclass
class Storage:
    buckets: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> settings
    log: list[str] = field(default_factory=list)

    def create_bucket(self, inputs: dict[str, Any]) -> dict[str, Any]:
        name = str(inputs["name"])
        if name in self.buckets:
            raise StorageError(
                f"googleapi: Error 409: Your previous request to create the named bucket "
                f"succeeded and you already own it., conflict (bucket {name})"
            )
        settings = {key: value for key, value in inputs.items() if key != "forceDestroy"}
        self.buckets[name] = {**settings, "project": inputs.get("project") or PROJECT}
        self.log.append(f"create bucket {name}")
        return dict(self.buckets[name])

    def read_bucket(self, import_id: str) -> dict[str, Any] | None:
        """The provider's inputs of the bucket `import_id` names, or None if there is none."""
        project, _, name = import_id.rpartition("/")
        bucket = self.buckets.get(name)
        if bucket is None or (project and bucket["project"] != project):
            return None
        return {**bucket, "forceDestroy": False}

    def delete_bucket(self, name: str) -> None:
        del self.buckets[name]
        self.log.append(f"delete bucket {name}")
