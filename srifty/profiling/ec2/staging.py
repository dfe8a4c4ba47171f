"""What a run ships to S3 and reads back from it: the bucket and prefix (:class:`S3Location`),
srifty's own source, the script's project and its requirements file, and the profile the
instances upload (:class:`S3Staging`).

Everything a node needs goes through S3 under ``<prefix>/runs/<run-id>/`` (the instances read
it with their instance profile's credentials; none travel in user data), and the profile comes
back the same way, checked before it is saved.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from srifty import profile
from srifty.errors import ProfileFormatError, ProfilingFailed, SriftyError
from srifty.profiling.ec2.aws import AwsClients, client_error_code
from srifty.profiling.ec2.config import Ec2Config
from srifty.profiling.launcher import ProfileRequest
from srifty.profiling.project_bundle import DEFAULT_MAX_BYTES, MB, ProjectBundle, collect


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading/trailing slash, may be ""

    @classmethod
    def parse(cls, uri: str) -> "S3Location":
        if not uri.startswith("s3://") or len(uri) <= 5:
            raise SriftyError(f"--s3-uri must look like s3://bucket/prefix (got {uri!r}).",
                              "Give a bucket you own, or leave --s3-uri out and srifty creates a private one.")
        bucket, _, prefix = uri[5:].partition("/")
        if not bucket:
            raise SriftyError(f"--s3-uri {uri!r} names no bucket.", "Use s3://bucket/prefix.")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def uri(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def source_tarball() -> bytes:
    """srifty's own source (the package and pyproject.toml) as a gzipped tar for pip install."""
    import srifty

    pkg = Path(srifty.__file__).resolve().parent
    root = pkg.parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            return None if "__pycache__" in info.name or info.name.endswith(".pyc") else info

        tar.add(str(pkg), arcname="srifty", filter=skip)
        if (root / "pyproject.toml").is_file():
            tar.add(str(root / "pyproject.toml"), arcname="pyproject.toml")
        if (root / "README.md").is_file():
            tar.add(str(root / "README.md"), arcname="README.md")
    return buf.getvalue()


def requirements_file(request: ProfileRequest, bundle: ProjectBundle | None) -> Path | None:
    """--requirements; else requirements.txt next to the script; else one at the project root."""
    if request.requirements:
        return Path(request.requirements).resolve()
    if not request.script:
        return None
    candidates = [Path(request.script).resolve().parent / "requirements.txt"]
    if bundle is not None:
        candidates.append(bundle.root / "requirements.txt")
    return next((c for c in candidates if c.is_file()), None)


def shipped_in(bundle: ProjectBundle | None, path: Path) -> bool:
    if bundle is None:
        return False
    rel = bundle.relative(path)
    return rel is not None and bundle.contains(rel)


def project_bundle(request: ProfileRequest, config: Ec2Config) -> ProjectBundle | None:
    """The script's project, as it will be shipped (None for --collectives: srifty's own benchmark)."""
    if request.collectives or not request.script:
        return None
    limit = int(config.max_bundle_mb * MB) if config.max_bundle_mb else DEFAULT_MAX_BYTES
    req = requirements_file(request, None)  # shipped even if git ignores it, when inside the project
    return collect(request.script, always=(req,) if req else (), max_bytes=limit, module=bool(request.module))


class S3Staging:
    """The run's bucket, the inputs uploaded to it, and the objects the instances write there."""

    def __init__(self, clients: AwsClients, log: Callable[[str], None]) -> None:
        self.clients = clients
        self.log = log

    def ensure_bucket(self, request: ProfileRequest, region: str) -> S3Location:
        """--s3-uri, else srifty's private bucket for this account and region, created if missing."""
        from botocore.exceptions import ClientError

        if request.s3_uri:
            return S3Location.parse(request.s3_uri)
        account = self.clients.sts.get_caller_identity()["Account"]
        loc = S3Location(f"srifty-{account}-{region}", "srifty")
        s3 = self.clients.s3
        try:
            s3.head_bucket(Bucket=loc.bucket)
            return loc
        except ClientError as exc:
            if client_error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
                raise SriftyError(f"Cannot use the bucket {loc.bucket}: {exc}.",
                                  "Give a bucket you own with --s3-uri s3://bucket/prefix.") from None
        kwargs: dict[str, Any] = {"Bucket": loc.bucket, "ObjectOwnership": "BucketOwnerEnforced"}
        if region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        s3.create_bucket(**kwargs)
        s3.put_public_access_block(Bucket=loc.bucket, PublicAccessBlockConfiguration={
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
        s3.put_bucket_encryption(Bucket=loc.bucket, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
        self.log(f"created private bucket s3://{loc.bucket} (public access blocked, SSE-S3)")
        return loc

    def put(self, loc: S3Location, key: str, body: bytes) -> None:
        self.clients.s3.put_object(Bucket=loc.bucket, Key=key, Body=body, ServerSideEncryption="AES256")

    def upload_inputs(self, request: ProfileRequest, loc: S3Location, bundle: ProjectBundle | None,
                      keys: dict[str, str]) -> None:
        """srifty's source, the project (its notes logged: what was left out, and why), and a
        requirements file from outside the project."""
        self.put(loc, keys["source"], source_tarball())
        if bundle is not None:
            tarball = bundle.tarball()
            self.put(loc, keys["project"], tarball)
            self.log(f"{bundle.describe()} ({len(tarball) / MB:.1f} MB compressed)")
            for note in bundle.notes():
                self.log(note)
        req = requirements_file(request, bundle)
        if req and keys.get("requirements"):
            self.put(loc, keys["requirements"], req.read_bytes())

    def object(self, loc: S3Location, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.clients.s3.get_object(Bucket=loc.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if client_error_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def object_exists(self, loc: S3Location, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.clients.s3.head_object(Bucket=loc.bucket, Key=key)
            return True
        except ClientError as exc:
            if client_error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def collect(self, loc: S3Location, key: str, instance_type: str) -> dict[str, Any]:
        """The profile an instance uploaded to ``key``, checked: JSON, a valid profile, of this type."""
        body = self.object(loc, key) or b""
        source = f"s3://{loc.bucket}/{key}"
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise ProfilingFailed(f"The profile uploaded by {instance_type} ({source}) is not JSON: {exc}.",
                                  "The instance's srifty may be broken or a different version; read its node log next to it.") from None
        try:
            profile.validate(doc, source)
        except ProfileFormatError as exc:
            raise ProfilingFailed(f"The profile uploaded by {instance_type} is not a valid srifty profile: {exc.message}",
                                  "Check that the AMI's srifty matches this one (the launcher uploads its own source).") from None
        got = (doc.get("cluster") or {}).get("instance_types") or []
        if instance_type not in got:
            raise ProfilingFailed(f"The profile at {source} is for {', '.join(got) or 'no instance type'}, not {instance_type}.",
                                  "Another run may share this S3 prefix; use a fresh --s3-uri.")
        return doc
