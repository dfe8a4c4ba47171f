"""The EC2 profiling backend against a moto server (never real AWS).

moto never runs user data, so a background thread stands in for the instances: it
watches for the run's instances, waits for the launcher's rendezvous key, and uploads a
recorded profile (profiles/local/cnn_resnet.json relabelled) where the run waits for it,
or misbehaves as a test asks. After every case no srifty-tagged instance is left alive.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
from botocore.exceptions import ClientError  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from srifty.catalog import Catalog  # noqa: E402
from srifty.errors import ProfilingFailed, SriftyError, Terminated  # noqa: E402
from srifty.profiling.ec2 import TAG_MANAGED, Ec2Backend, find_leftovers  # noqa: E402
from srifty.profiling.launcher import ProfileRequest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "profiles" / "local" / "cnn_resnet.json"
SCRIPT = str(ROOT / "examples" / "cnn_resnet.py")
BUCKET = "srifty-test-profiles"
S3_URI = f"s3://{BUCKET}/prof"
FAKE_KEY_ID = "AKIAFAKEKEYID0LEAKME"
FAKE_SECRET = "fakeSecretValue/DoNotLeak+0123456789abcdef"
DLAMI_PATTERN = "Deep Learning AMI Ubuntu*"  # present in moto's default image set, owner amazon


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.snapshot()


@pytest.fixture
def aws(moto_endpoint, monkeypatch):
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).read()
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("SRIFTY_EC2_NODE", raising=False)
    ec2 = boto3.client("ec2")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    boto3.client("iam").create_instance_profile(InstanceProfileName="srifty-profiler")
    return ec2, s3


def alive(ec2) -> list[dict[str, Any]]:
    return find_leftovers(ec2)


def recorded_profile(instance_type: str) -> bytes:
    doc = json.loads(RECORDED.read_text())
    doc["cluster"]["launcher"] = "ec2"
    doc["cluster"]["instance_types"] = [instance_type]
    for h in doc["cluster"]["hosts"]:
        h["instance_type"] = instance_type
    return json.dumps(doc).encode()


class FakeInstances(threading.Thread):
    """Plays the instances' part: per (type, attempt) do 'ok', 'malformed', 'silent' or 'terminate'."""

    def __init__(self, ec2, s3, behaviour: dict[tuple[str, int], str] | None = None) -> None:
        super().__init__(daemon=True)
        self.ec2, self.s3 = ec2, s3
        self.behaviour = behaviour or {}
        self.stop = threading.Event()
        self.handled: set[tuple[str, str, int]] = set()
        self.rendezvous: dict[str, dict[str, Any]] = {}
        self.user_data: dict[str, str] = {}
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            while not self.stop.wait(0.05):
                self.tick()
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def tick(self) -> None:
        filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        groups: dict[tuple[str, str, int], list[str]] = {}
        for res in self.ec2.describe_instances(Filters=filters)["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                key = (tags["srifty:run-id"], tags["srifty:instance-type"], int(tags["srifty:attempt"]))
                groups.setdefault(key, []).append(inst["InstanceId"])
        for key, ids in groups.items():
            if key in self.handled:
                continue
            run_id, itype, attempt = key
            prefix = f"prof/runs/{run_id}/{itype}/attempt-{attempt}"
            try:
                rdzv = json.loads(self.s3.get_object(Bucket=BUCKET, Key=f"{prefix}/rendezvous.json")["Body"].read())
            except ClientError:
                continue  # the launcher has not written it yet
            import base64

            ud = self.ec2.describe_instance_attribute(InstanceId=ids[0], Attribute="userData")["UserData"]["Value"]
            self.user_data[f"{itype}/{attempt}"] = base64.b64decode(ud).decode()
            self.rendezvous[f"{itype}/{attempt}"] = rdzv
            self.handled.add(key)
            what = self.behaviour.get((itype, attempt), "ok")
            if what == "ok":
                self.s3.put_object(Bucket=BUCKET, Key=f"{prefix}/profile.json", Body=recorded_profile(itype))
            elif what == "malformed":
                self.s3.put_object(Bucket=BUCKET, Key=f"{prefix}/profile.json", Body=b'{"schema_version": 1, "kind": ')
            elif what == "terminate":
                self.ec2.terminate_instances(InstanceIds=ids[:1])
            # 'silent': never answer

    def __enter__(self) -> "FakeInstances":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.join(5)


class RecordingEc2:
    """Wraps a real (moto) client: records RunInstances calls, optionally fails zones for capacity."""

    def __init__(self, client, no_capacity_in: tuple[str, ...] = ()) -> None:
        self._client = client
        self.no_capacity_in = no_capacity_in
        self.run_calls: list[dict[str, Any]] = []

    def run_instances(self, **kwargs: Any) -> Any:
        self.run_calls.append(kwargs)
        zone = kwargs.get("Placement", {}).get("AvailabilityZone")
        if zone in self.no_capacity_in:
            raise ClientError({"Error": {"Code": "InsufficientInstanceCapacity",
                                         "Message": f"We currently do not have sufficient capacity in {zone}."}},
                              "RunInstances")
        return self._client.run_instances(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def make_backend(catalog, ec2=None, **kw: Any) -> tuple[Ec2Backend, list[str]]:
    logs: list[str] = []
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("boot_overhead_s", 0.0)
    backend = Ec2Backend(ec2=ec2, catalog=catalog, ami_name_pattern=DLAMI_PATTERN, log=logs.append, **kw)
    return backend, logs


def request(**kw: Any) -> ProfileRequest:
    base = dict(script=SCRIPT, instance_types=["g4dn.xlarge", "g5.xlarge"], s3_uri=S3_URI,
                instance_profile="srifty-profiler", time_cap=20.0)
    base.update(kw)
    return ProfileRequest(**base)


# --------------------------------------------------------------------------- happy paths


def test_two_types_in_parallel_collect_and_terminate(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    rec = RecordingEc2(ec2)
    backend, logs = make_backend(catalog, rec)
    out = str(tmp_path / "cnn.profile.json")
    with FakeInstances(ec2, s3) as fake:
        doc = backend.profile(request(), out)
    assert not fake.errors
    assert doc["cluster"]["instance_types"] == ["g4dn.xlarge"]
    for t in ("g4dn.xlarge", "g5.xlarge"):
        written = json.loads((tmp_path / f"cnn.{t}.profile.json").read_text())
        assert written["cluster"]["instance_types"] == [t]
    assert {c["InstanceType"] for c in rec.run_calls} == {"g4dn.xlarge", "g5.xlarge"}
    assert all("InstanceMarketOptions" not in c for c in rec.run_calls)
    ami = rec.run_calls[0]["ImageId"]
    assert ec2.describe_images(ImageIds=[ami])["Images"][0]["Name"].startswith("Deep Learning AMI")
    # the script was uploaded for user data to fetch, and is referenced, not embedded
    run_id = rec.run_calls[0]["TagSpecifications"][0]["Tags"][1]["Value"]
    key = f"prof/runs/{run_id}/script/cnn_resnet.py"
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == Path(SCRIPT).read_bytes()
    ud = fake.user_data["g5.xlarge/1"]
    assert f"s3://{BUCKET}/{key}" in ud and "import torch" not in ud
    assert alive(ec2) == []


def test_spot_run_asks_for_spot_and_multi_node_rendezvous(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    rec = RecordingEc2(ec2)
    backend, _ = make_backend(catalog, rec)
    with FakeInstances(ec2, s3) as fake:
        backend.profile(request(instance_types=["g5.xlarge"], spot=True, nodes=2), str(tmp_path / "p.json"))
    (call,) = rec.run_calls
    assert call["InstanceMarketOptions"]["MarketType"] == "spot"
    assert call["MinCount"] == call["MaxCount"] == 2
    rdzv = fake.rendezvous["g5.xlarge/1"]
    assert len(rdzv["node_ips"]) == 2 and rdzv["master_addr"] == rdzv["node_ips"][0]
    assert "--rdzv-backend" not in fake.user_data["g5.xlarge/1"]  # the node's srifty builds torchrun itself
    assert "rendezvous.json" in fake.user_data["g5.xlarge/1"]
    assert json.loads((tmp_path / "p.json").read_text())["cluster"]["instance_types"] == ["g5.xlarge"]
    assert alive(ec2) == []


def test_node_mode_plan_uses_c10d_on_first_node(monkeypatch, catalog) -> None:
    monkeypatch.setenv("SRIFTY_EC2_NODE", "1")
    monkeypatch.setenv("SRIFTY_EC2_NNODES", "2")
    monkeypatch.setenv("SRIFTY_EC2_NODE_RANK", "1")
    monkeypatch.setenv("SRIFTY_EC2_MASTER", "10.0.0.11")
    backend, _ = make_backend(catalog)
    plan = backend.plan(ProfileRequest(script=SCRIPT, nproc=4, instance_type="g5.xlarge"), "/tmp/x")
    argv = plan.commands[0].argv
    assert argv[argv.index("--rdzv-endpoint") + 1] == "10.0.0.11:29400"
    assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--nnodes") + 1] == "2"


# --------------------------------------------------------------------------- faults


def test_capacity_error_moves_to_next_zone(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    rec = RecordingEc2(ec2, no_capacity_in=("us-east-1a",))
    backend, logs = make_backend(catalog, rec)
    with FakeInstances(ec2, s3):
        backend.profile(request(instance_types=["g5.xlarge"]), str(tmp_path / "p.json"))
    zones = [c["Placement"]["AvailabilityZone"] for c in rec.run_calls]
    assert zones[:2] == ["us-east-1a", "us-east-1b"]
    assert any("no capacity in us-east-1a" in m for m in logs)
    assert alive(ec2) == []


def test_capacity_nowhere_is_reported(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    zones = tuple(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    backend, _ = make_backend(catalog, RecordingEc2(ec2, no_capacity_in=zones))
    with pytest.raises(ProfilingFailed, match="No capacity for 1 x g5.xlarge"):
        backend.profile(request(instance_types=["g5.xlarge"]), str(tmp_path / "p.json"))
    assert alive(ec2) == []


def test_spot_loss_retries_on_demand_once(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    rec = RecordingEc2(ec2)
    backend, logs = make_backend(catalog, rec)
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "terminate"}):
        backend.profile(request(instance_types=["g5.xlarge"], spot=True), str(tmp_path / "p.json"))
    assert [("InstanceMarketOptions" in c) for c in rec.run_calls] == [True, False]
    assert any("retrying once on-demand" in m for m in logs)
    assert json.loads((tmp_path / "p.json").read_text())["status"] == "complete"
    assert alive(ec2) == []


def test_instance_lost_keeps_other_types_profiles(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    backend, _ = make_backend(catalog, ec2)
    out = tmp_path / "cnn.profile.json"
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "terminate"}):
        with pytest.raises(ProfilingFailed, match="g5.xlarge instance.*terminated before the profile arrived") as info:
            backend.profile(request(), str(out))
    assert (tmp_path / "cnn.g4dn.xlarge.profile.json").is_file()
    assert not (tmp_path / "cnn.g5.xlarge.profile.json").exists()
    assert "cnn.g4dn.xlarge.profile.json" in str(info.value)
    assert alive(ec2) == []


def test_time_cap_terminates(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    backend, _ = make_backend(catalog, ec2)
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "silent"}):
        with pytest.raises(ProfilingFailed, match="within the time cap of 0 s"):
            backend.profile(request(instance_types=["g5.xlarge"], time_cap=0.3), str(tmp_path / "p.json"))
    assert alive(ec2) == []


def test_malformed_profile_is_a_clear_error(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    backend, _ = make_backend(catalog, ec2)
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "malformed"}):
        with pytest.raises(ProfilingFailed, match="profile uploaded by g5.xlarge .* is not JSON"):
            backend.profile(request(instance_types=["g5.xlarge"]), str(tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()
    assert alive(ec2) == []


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), Terminated(signal.SIGTERM)], ids=["ctrl-c", "sigterm"])
def test_keyboard_interrupt_in_poll_loop_terminates_everything(aws, catalog, tmp_path, interrupt) -> None:
    """Ctrl-C, or SIGTERM (which srifty's CLI raises as Terminated, a KeyboardInterrupt) mid-run:
    every instance launched is terminated."""
    ec2, s3 = aws
    polls = {"n": 0}

    def hook(instance_type: str, attempt: int) -> None:
        polls["n"] += 1
        if instance_type == "g5.xlarge" and polls["n"] >= 3:
            raise interrupt

    backend, _ = make_backend(catalog, ec2, on_poll=hook)
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "silent", ("g4dn.xlarge", 1): "silent"}):
        with pytest.raises(KeyboardInterrupt):
            backend.profile(request(), str(tmp_path / "p.json"))
    assert len(backend.registry.launched) == 2
    assert alive(ec2) == []


# --------------------------------------------------------------------------- refusals, dry run, cleanup


def test_max_cost_refuses_before_launch(aws, catalog) -> None:
    ec2, _ = aws
    backend, _ = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match=r"above --max-cost \$0.01.*Nothing was launched"):
        backend.profile(request(spot=True, nodes=2, max_cost=0.01), None)
    assert ec2.describe_instances()["Reservations"] == []


def test_unknown_instance_type_says_did_you_mean(aws, catalog) -> None:
    backend, _ = make_backend(catalog, aws[0])
    with pytest.raises(SriftyError, match="Did you mean 'g5.xlarge'"):
        backend.profile(request(instance_types=["g5.xlarg"]), None)


def test_dry_run_prints_requests_and_launches_nothing(aws) -> None:
    from srifty.cli import cli

    ec2, _ = aws
    res = CliRunner().invoke(cli, ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g4dn.xlarge,g5.xlarge",
                                   "--spot", "--nodes", "2", "--ami", "ami-0123456789", "--s3-uri", S3_URI, "--dry-run"])
    assert res.exit_code == 0, res.output
    body = res.output[: res.output.index("\n# user data")]
    doc = json.loads(body)
    reqs = doc["run_instances"]
    assert [r["InstanceType"] for r in reqs] == ["g4dn.xlarge", "g5.xlarge"]
    assert all(r["InstanceMarketOptions"]["MarketType"] == "spot" and r["MinCount"] == 2 for r in reqs)
    assert "srifty profile /opt/srifty/script/cnn_resnet.py" in res.output  # user data, decoded
    assert "# estimated cost" in res.output and "total $" in res.output
    assert ec2.describe_instances()["Reservations"] == []


def test_cleanup_terminates_only_srifty_leftovers(aws) -> None:
    from srifty.cli import cli

    ec2, _ = aws
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "srifty:managed", "Value": "true"},
                                                  {"Key": "srifty:run-id", "Value": "leftover1"}]}]
    mine = ec2.run_instances(ImageId=ami, MinCount=2, MaxCount=2, InstanceType="t3.micro", TagSpecifications=tags)
    other = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.micro")
    runner = CliRunner()
    res = runner.invoke(cli, ["ec2", "cleanup", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert len(alive(ec2)) == 2 and "would terminate 2" in res.output
    res = runner.invoke(cli, ["ec2", "cleanup", "--run-id", "leftover1"])
    assert res.exit_code == 0, res.output
    assert alive(ec2) == []
    other_id = other["Instances"][0]["InstanceId"]
    state = ec2.describe_instances(InstanceIds=[other_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"
    assert {i["InstanceId"] for i in mine["Instances"]} <= {
        i["InstanceId"] for r in ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["terminated"]}])["Reservations"]
        for i in r["Instances"]}


def test_no_credentials_in_user_data_or_profile(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    backend, logs = make_backend(catalog, ec2)
    out = tmp_path / "p.json"
    with FakeInstances(ec2, s3) as fake:
        backend.profile(request(instance_types=["g5.xlarge"]), str(out))
    texts = [*fake.user_data.values(), out.read_text(), "\n".join(logs)]
    for text in texts:
        assert FAKE_KEY_ID not in text and FAKE_SECRET not in text
    assert "AWS_SECRET_ACCESS_KEY" not in fake.user_data["g5.xlarge/1"]
    # the objects srifty wrote are encrypted at rest
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="prof/runs/")["Contents"]]
    src = next(k for k in keys if k.endswith("srifty-src.tar.gz"))
    assert s3.head_object(Bucket=BUCKET, Key=src)["ServerSideEncryption"] == "AES256"


def test_created_bucket_is_private_and_encrypted(aws, catalog) -> None:
    ec2, s3 = aws
    backend, _ = make_backend(catalog, ec2)
    loc = backend.ensure_bucket(request(s3_uri=None))
    assert loc.bucket == "srifty-123456789012-us-east-1"
    pab = s3.get_public_access_block(Bucket=loc.bucket)["PublicAccessBlockConfiguration"]
    assert all(pab.values())
    enc = s3.get_bucket_encryption(Bucket=loc.bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert enc["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
