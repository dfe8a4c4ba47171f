"""What every part of the EC2 backend talks to AWS with: srifty's tags, the instance states and
error codes it reads, and the boto3 clients.

The tags are how ``srifty ec2 cleanup`` tells srifty's resources from anyone else's, so every
launch, placement group and search uses these names. boto3 is imported only when a client is
first needed (the CLI's cold start); clients are injectable (tests pass moto-backed ones).
"""

from __future__ import annotations

from typing import Any

TAG_MANAGED = "srifty:managed"
TAG_RUN_ID = "srifty:run-id"
TAG_TYPE = "srifty:instance-type"
TAG_ATTEMPT = "srifty:attempt"
CAPACITY_ERRORS = ("InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity")
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
LOST_STATES = ("shutting-down", "terminated", "stopping", "stopped")


def client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


class AwsClients:
    """The EC2, S3 and STS clients of one backend: the ones given, else created on first use
    from the standard boto3 credential chain, in ``region`` (set when a run starts)."""

    def __init__(self, ec2: Any = None, s3: Any = None, sts: Any = None) -> None:
        self._ec2, self._s3, self._sts = ec2, s3, sts
        self.region: str | None = None

    def _client(self, service: str) -> Any:
        import boto3

        return boto3.session.Session(region_name=self.region).client(service)

    @property
    def ec2(self) -> Any:
        if self._ec2 is None:
            self._ec2 = self._client("ec2")
        return self._ec2

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = self._client("s3")
        return self._s3

    @property
    def sts(self) -> Any:
        if self._sts is None:
            self._sts = self._client("sts")
        return self._sts
