"""The EC2 profiling backend against a moto server (never real AWS).

moto never runs user data, so a background thread stands in for the instances: it
watches for the run's instances, waits for the launcher's rendezvous key, and uploads a
recorded profile (profiles/local/cnn_resnet.json relabelled) where the run waits for it,
or misbehaves as a test asks. After every case no srifty-tagged instance is left alive.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
import signal
import socket
import tarfile
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
def aws(moto_endpoint, monkeypatch, tmp_path):
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).read()
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("SRIFTY_EC2_NODE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no srifty config unless a test writes one
    monkeypatch.chdir(ROOT)  # the project's working directory on the instance mirrors this one
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
        if "SubnetId" in kwargs:  # the subnet's zone
            zone = self._client.describe_subnets(SubnetIds=[kwargs["SubnetId"]])["Subnets"][0]["AvailabilityZone"]
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
                instance_profile="srifty-profiler", time_cap=20.0, yes=True)
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
    # the script's project (here this repository) was uploaded for user data to fetch, and is
    # referenced, not embedded; the script runs from inside it, next to the _common it imports
    run_id = rec.run_calls[0]["TagSpecifications"][0]["Tags"][1]["Value"]
    key = f"prof/runs/{run_id}/project.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())) as tar:
        assert tar.extractfile("examples/cnn_resnet.py").read() == Path(SCRIPT).read_bytes()
        assert "examples/_common.py" in tar.getnames()
        assert not any(n == ".git" or n.startswith(".git/") for n in tar.getnames())
    ud = fake.user_data["g5.xlarge/1"]
    assert f"s3://{BUCKET}/{key}" in ud and "import torch" not in ud
    assert "cd /opt/srifty/project && /opt/srifty/venv/bin/srifty profile examples/cnn_resnet.py" in ud
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


def test_a_node_s_profile_says_its_network_is_tcp_and_whether_grouped(monkeypatch) -> None:
    """The instances get no EFA interface, so the profile's network says NCCL ran over TCP, and
    whether the nodes sat in a placement group (the user data's SRIFTY_EC2_PLACEMENT_GROUP)."""
    from srifty.profiling.ec2.node import node_cluster_block

    monkeypatch.setenv("SRIFTY_EC2_NNODES", "2")
    monkeypatch.setenv("SRIFTY_EC2_NODE_IPS", "10.0.0.11,10.0.0.12")
    for flag, grouped in (("1", True), ("0", False)):
        monkeypatch.setenv("SRIFTY_EC2_PLACEMENT_GROUP", flag)
        block = node_cluster_block("ec2", ProfileRequest(script=SCRIPT, instance_type="g5.12xlarge"), 8, "cuda")
        assert block["network"]["transport"] == "tcp" and block["network"]["placement_group"] is grouped


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
        with pytest.raises(ProfilingFailed, match=r"interrupted \((Ctrl-C|SIGTERM)\): all 2 instance\(s\) it launched "
                           "were terminated") as info:
            backend.profile(request(), str(tmp_path / "p.json"))
    assert info.value.exit_code == 128 + int(getattr(interrupt, "signum", signal.SIGINT))  # 130, or 143
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
    assert "cd /opt/srifty/project && /opt/srifty/venv/bin/srifty profile examples/cnn_resnet.py" in res.output
    assert "tar -xzf project.tar.gz -C /opt/srifty/project" in res.output  # user data, decoded
    assert f"# project {ROOT} (git work tree)" in res.output
    assert "# estimated cost" in res.output and "total $" in res.output
    assert "# estimated cost $" in res.output and "(worst case $" in res.output
    assert "# no cost limit" in res.output
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


# --------------------------------------------------------------------------- cost and consent


def _launched_nothing(ec2, s3) -> bool:
    uploaded = s3.list_objects_v2(Bucket=BUCKET, Prefix="prof/runs/").get("KeyCount", 0)
    return ec2.describe_instances()["Reservations"] == [] and uploaded == 0


def write_config(text: str) -> Path:
    import os

    path = Path(os.environ["XDG_CONFIG_HOME"]) / "srifty" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_no_launch_without_consent(aws, catalog) -> None:
    """No --yes, nobody to ask (stdin not a terminal), no cost limit: refused before any AWS call."""
    ec2, s3 = aws
    backend, logs = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match=r"needs consent.*stdin is not a terminal.*Nothing was launched.*--yes"):
        backend.profile(request(yes=False), None)
    assert _launched_nothing(ec2, s3)
    assert any(m.startswith("estimated cost $") and "(worst case $" in m for m in logs)
    assert any("# estimated cost" in m for m in logs)  # the table, by type


def test_declined_prompt_launches_nothing(aws, catalog) -> None:
    ec2, s3 = aws
    asked: list[str] = []
    backend, _ = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match="Not confirmed: nothing was launched"):
        backend.profile(request(yes=False, confirm=lambda q: asked.append(q) or False), None)
    assert asked and asked[0].startswith(
        "Launch 1 x g4dn.xlarge (on-demand), 1 x g5.xlarge (on-demand) in us-east-1, for up to $")
    assert _launched_nothing(ec2, s3)


def test_confirmed_prompt_launches_after_showing_the_cost(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    backend, logs = make_backend(catalog, ec2)
    with FakeInstances(ec2, s3):
        backend.profile(request(instance_types=["g5.xlarge"], yes=False, confirm=lambda q: True), str(tmp_path / "p.json"))
    cost = next(i for i, m in enumerate(logs) if m.startswith("estimated cost $"))
    launched = next(i for i, m in enumerate(logs) if "launched" in m)
    assert cost < launched
    assert alive(ec2) == []


def test_config_max_cost_refuses_over_it_and_lets_a_script_run_under_it(aws, catalog, tmp_path) -> None:
    """ec2.max_cost in $XDG_CONFIG_HOME/srifty/config.yaml is --max-cost's default: above it nothing is
    launched; under it, a run with nobody to ask goes ahead (the limit is the consent)."""
    ec2, s3 = aws
    path = write_config("ec2:\n  max_cost: 0.001\n")
    backend, _ = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match=rf"above ec2.max_cost in {path} \$0.00 .*Nothing was launched"):
        backend.profile(request(yes=False), None)
    assert _launched_nothing(ec2, s3)
    write_config("ec2: {max_cost: 1000}\n")
    with FakeInstances(ec2, s3):
        backend.profile(request(instance_types=["g5.xlarge"], yes=False), str(tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text())["status"] == "complete"
    assert alive(ec2) == []


def test_max_cost_flag_overrides_the_config(aws, catalog) -> None:
    ec2, s3 = aws
    write_config("ec2: {max_cost: 1000}\n")
    backend, _ = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match=r"above --max-cost \$0.00"):
        backend.profile(request(max_cost=0.001), None)
    assert _launched_nothing(ec2, s3)


@pytest.mark.parametrize("text, match", [
    ("ec2: {maxcost: 5}\n", "must be a mapping with the keys max_cost, max_bundle_mb"),
    ("ec2: {max_cost: -1}\n", "ec2.max_cost must be a positive number"),
    ("ec2: {max_cost: [\n", "Cannot read srifty's config file"),
])
def test_bad_config_is_a_clear_error(aws, catalog, text, match) -> None:
    ec2, s3 = aws
    write_config(text)
    backend, _ = make_backend(catalog, ec2)
    with pytest.raises(SriftyError, match=match):
        backend.profile(request(), None)
    assert _launched_nothing(ec2, s3)


def test_cli_without_yes_off_a_terminal_refuses(aws) -> None:
    """The CLI passes no prompt when stdin is not a terminal: no --yes and no limit means no launch."""
    from srifty.cli import cli

    ec2, s3 = aws
    args = ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g5.xlarge", "--ami", "ami-0123456789",
            "--s3-uri", S3_URI, "--instance-profile", "srifty-profiler"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code != 0
    assert "needs consent" in str(res.exception) and "Add --yes" in str(res.exception)
    assert "estimated cost $" in res.output  # printed (to stderr) before refusing
    assert _launched_nothing(ec2, s3)
    path = write_config("ec2: {max_cost: 0.001}\n")
    res = CliRunner().invoke(cli, [*args, "--yes"])
    assert f"above ec2.max_cost in {path}" in str(res.exception)  # --yes does not lift the limit
    assert _launched_nothing(ec2, s3)


def test_launch_prompt_asks_only_on_a_terminal(monkeypatch) -> None:
    import sys

    from srifty.commands.ec2 import launch_prompt

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    monkeypatch.setattr("sys.stderr", Tty())
    assert launch_prompt() is None
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    monkeypatch.setattr("sys.stderr", io.StringIO())  # the question would go unseen
    assert launch_prompt() is None
    monkeypatch.setattr("sys.stderr", Tty())
    assert launch_prompt()("Launch?") is True
    assert "Launch? [y/N]" in sys.stderr.getvalue()
    monkeypatch.setattr("sys.stdin", Tty("\n"))  # the default is no
    assert launch_prompt()("Launch?") is False


# --------------------------------------------------------------------------- Ctrl-C, pressed again and again


class InterruptingEc2(RecordingEc2):
    """Presses Ctrl-C (a real SIGINT to this process) inside every TerminateInstances call; the
    launch threads' own calls then fail, so that the launcher's final clean-up (in the main
    thread) has to terminate the instances, with a Ctrl-C arriving in the middle of that too."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.terminate_threads: list[str] = []

    def terminate_instances(self, **kwargs: Any) -> Any:
        import os
        import time

        name = threading.current_thread().name
        self.terminate_threads.append(name)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the main thread runs its signal handler meanwhile
        if name.startswith("srifty-ec2"):
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "TerminateInstances")
        return self._client.terminate_instances(**kwargs)


def test_repeated_ctrl_c_still_terminates_every_instance(aws, catalog, tmp_path) -> None:
    """Ctrl-C while the run waits, again while the threads stop, again during the final
    terminate: one interruption comes out (exit status 130), after every instance was terminated."""
    import os

    ec2, s3 = aws
    rec = InterruptingEc2(ec2)
    polled: set[str] = set()
    pressed = threading.Event()

    def hook(instance_type: str, attempt: int) -> None:
        polled.add(instance_type)
        if len(polled) == 2 and not pressed.is_set():
            pressed.set()
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: both types are waiting for profiles

    before = signal.getsignal(signal.SIGINT)
    backend, logs = make_backend(catalog, rec, on_poll=hook)
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "silent", ("g4dn.xlarge", 1): "silent"}):
        with pytest.raises(ProfilingFailed, match=r"interrupted \(Ctrl-C\)") as info:
            backend.profile(request(), str(tmp_path / "p.json"))
    assert info.value.exit_code == 130
    assert pressed.is_set() and len(backend.registry.launched) == 2
    assert alive(ec2) == []
    assert backend.registry.alive() == []
    assert sum(n.startswith("srifty-ec2") for n in rec.terminate_threads) == 2  # each thread tried, and failed
    assert rec.terminate_threads[-1] == "MainThread"  # the final clean-up did it, Ctrl-C or not
    assert any(m.startswith("Still stopping run") and "srifty ec2 cleanup --run-id" in m for m in logs)
    assert any(m.startswith("terminating 2 instance(s)") for m in logs)
    assert signal.getsignal(signal.SIGINT) is before  # the launcher's own handler is gone again


# The CLI as a user runs it, except that AWS is slow to answer TerminateInstances (1.5 s), so that
# the Ctrl-Cs pressed after the first one land while the launcher stops its threads and terminates.
SLOW_TERMINATE_CLI = """
import sys, time
import botocore.client
_call = botocore.client.BaseClient._make_api_call
def _slow(self, operation, params):
    if operation == "TerminateInstances":
        time.sleep(1.5)
    return _call(self, operation, params)
botocore.client.BaseClient._make_api_call = _slow
from srifty.cli import main
main(sys.argv[1:])
"""


def test_cli_three_quick_ctrl_c_interrupted_without_traceback(aws, tmp_path, monkeypatch) -> None:
    """`srifty profile --backend ec2 --yes` in a subprocess: launched (--yes is consent off a
    terminal), then Ctrl-C three times, 0.2 s apart. It says it was interrupted and that every
    instance was terminated, exits 130, shows no traceback, and no instance is left running."""
    import os
    import subprocess
    import sys
    import time

    ec2, s3 = aws
    monkeypatch.delenv("SRIFTY_CATALOG", raising=False)
    monkeypatch.setenv("SRIFTY_CATALOG_DIR", str(tmp_path / "no-catalog-cache"))  # the shipped snapshot
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    argv = ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g4dn.xlarge,g5.xlarge", "--ami", ami,
            "--s3-uri", S3_URI, "--instance-profile", "srifty-profiler", "--time-cap", "120", "--yes",
            "--out", str(tmp_path / "p.json")]
    lines: list[str] = []
    with FakeInstances(ec2, s3, {("g5.xlarge", 1): "silent", ("g4dn.xlarge", 1): "silent"}):
        proc = subprocess.Popen([sys.executable, "-c", SLOW_TERMINATE_CLI, *argv], cwd=ROOT, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 90
            while sum("waiting for the profile" in line for line in lines) < 2:
                assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
                time.sleep(0.1)
            for _ in range(3):
                os.kill(proc.pid, signal.SIGINT)
                time.sleep(0.2)
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(5)
    err = "".join(lines)
    assert rc == 130, err
    assert err.rstrip().splitlines()[-1].startswith(
        "Error: EC2 profiling was interrupted (Ctrl-C): all 2 instance(s) it launched were terminated."), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "Still stopping run" in err, err
    assert alive(ec2) == []


class PlacementGroupsEc2(RecordingEc2):
    """moto (5.2) has no placement-group API: these three calls answer as EC2 documents them
    (CreatePlacementGroup, DescribePlacementGroups with tag filters, DeletePlacementGroup), with
    EC2's error when a group still holds live instances; everything else goes to moto."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.groups: dict[str, dict[str, Any]] = {}

    def create_placement_group(self, GroupName: str, Strategy: str, TagSpecifications=()) -> dict[str, Any]:
        tags = [t for spec in TagSpecifications if spec["ResourceType"] == "placement-group" for t in spec["Tags"]]
        self.groups[GroupName] = {"GroupName": GroupName, "State": "available", "Strategy": Strategy,
                                  "GroupId": f"pg-{len(self.groups):017x}", "Tags": tags}
        return {"PlacementGroup": self.groups[GroupName]}

    def describe_placement_groups(self, Filters=()) -> dict[str, Any]:
        def keep(g: dict[str, Any]) -> bool:
            tags = {t["Key"]: t["Value"] for t in g["Tags"]}
            return all(tags.get(f["Name"].removeprefix("tag:")) in f["Values"] for f in Filters)
        return {"PlacementGroups": [g for g in self.groups.values() if keep(g)]}

    def delete_placement_group(self, GroupName: str) -> dict[str, Any]:
        live = [i for r in self._client.describe_instances()["Reservations"] for i in r["Instances"]
                if i["State"]["Name"] != "terminated" and i["InstanceId"] in self.members(GroupName)]
        if live:
            raise ClientError({"Error": {"Code": "InvalidPlacementGroup.InUse",
                                         "Message": f"The placement group '{GroupName}' is in use"}},
                              "DeletePlacementGroup")
        del self.groups[GroupName]
        return {}

    def members(self, group: str) -> set[str]:
        return {i for call, ids in self.launched for i in ids if call.get("Placement", {}).get("GroupName") == group}

    def run_instances(self, **kwargs: Any) -> Any:
        resp = super().run_instances(**kwargs)
        self.launched.append((kwargs, [x["InstanceId"] for x in resp["Instances"]]))
        return resp

    @property
    def launched(self) -> list[tuple[dict[str, Any], list[str]]]:
        return self.__dict__.setdefault("_launched", [])


def test_placement_group_holds_the_nodes_and_is_deleted_after(aws, catalog, tmp_path) -> None:
    ec2, s3 = aws
    rec = PlacementGroupsEc2(ec2)
    backend, logs = make_backend(catalog, rec)
    with FakeInstances(ec2, s3) as fake:
        backend.profile(request(instance_types=["g5.12xlarge"], nodes=2, placement_group=True), str(tmp_path / "p.json"))
    # the nodes are told, so the profile they write says so (srifty.features.load_allreduce_rows)
    assert "SRIFTY_EC2_PLACEMENT_GROUP=1" in fake.user_data["g5.12xlarge/1"]
    (call,) = rec.run_calls
    run_id = next(t["Value"] for t in call["TagSpecifications"][0]["Tags"] if t["Key"] == "srifty:run-id")
    assert call["Placement"]["GroupName"] == f"srifty-{run_id}" and call["Placement"]["AvailabilityZone"]
    assert any(f"created cluster placement group srifty-{run_id}" in line for line in logs)
    assert any(f"deleted placement group srifty-{run_id}" in line for line in logs)
    assert rec.groups == {} and alive(ec2) == []


def test_cleanup_deletes_srifty_placement_groups_once_empty(aws) -> None:
    from srifty.profiling.ec2 import cleanup_placement_groups

    ec2 = PlacementGroupsEc2(aws[0])
    tags = [{"Key": "srifty:managed", "Value": "true"}, {"Key": "srifty:run-id", "Value": "r1"}]
    ec2.create_placement_group(GroupName="srifty-r1", Strategy="cluster",
                               TagSpecifications=[{"ResourceType": "placement-group", "Tags": tags}])
    ec2.create_placement_group(GroupName="theirs", Strategy="cluster")
    image = aws[0].describe_images()["Images"][0]["ImageId"]
    ids = [x["InstanceId"] for x in ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                                                      Placement={"GroupName": "srifty-r1"})["Instances"]]
    assert cleanup_placement_groups(ec2, "r1", dry_run=True) == (["srifty-r1"], [])
    assert cleanup_placement_groups(ec2, None, dry_run=False) == ([], ["srifty-r1"])  # an instance is still in it
    aws[0].terminate_instances(InstanceIds=ids)
    assert cleanup_placement_groups(ec2, None, dry_run=False) == (["srifty-r1"], [])
    assert set(ec2.groups) == {"theirs"}


def test_placement_group_needs_the_ec2_backend(tmp_path) -> None:
    from conftest import run_srifty

    res = run_srifty("profile", SCRIPT, "--placement-group", "--out", str(tmp_path / "p.json"))
    assert res.returncode == 1 and "--placement-group places EC2 instances" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "p.json").exists()


def test_a_plan_launches_on_ec2_and_is_compared(aws, catalog, tmp_path) -> None:
    """`srifty launch DIR --backend ec2`: the plan's nodes (type, count, spot) are what is launched,
    every instance is gone after, and the measured step is set against the plan's interval."""
    from srifty.launch import launch
    from srifty.plan import make_plan, write_plan
    from srifty.solver import Recommendation

    ec2, s3 = aws
    row = Recommendation(config="2xg5.xlarge@spot", market="spot", gpus=2, nodes=2, batch_split={"g5.xlarge": 32.0},
                         global_batch=64.0, iteration_ms=100.0, interval_ms=(60.0, 200.0),
                         throughput_samples_per_s=640.0, raw_throughput_samples_per_s=650.0, usd_per_hour=0.7,
                         usd_per_million_samples=0.3, interruptions_per_hour=0.1, source="transferred", mixed=False)
    write_plan(make_plan("cnn_resnet", SCRIPT, [], row, 1, "us-east-1", catalog), tmp_path / "plan")
    rec = RecordingEc2(ec2)
    backend, _ = make_backend(catalog, rec)
    with FakeInstances(ec2, s3):
        report = launch(tmp_path / "plan", "ec2", str(tmp_path / "run.json"), 5.0, runner=backend,
                        instance_profile="srifty-profiler", s3_uri=S3_URI, yes=True, time_cap=20.0)
    (call,) = rec.run_calls
    assert (call["InstanceType"], call["MinCount"]) == ("g5.xlarge", 2)
    assert call["InstanceMarketOptions"]["MarketType"] == "spot"
    measured = json.loads((tmp_path / "run.json").read_text())["summary"]["iteration_ms"]["median"]
    assert report.measured_ms == measured and report.inside == (60.0 <= measured <= 200.0)
    assert report.notes == () and alive(ec2) == []
    # EFA between the plan's nodes: the backend's run goes over TCP, and the report says so
    efa = replace(row, config="2xg4dn.metal@spot", batch_split={"g4dn.metal": 32.0}, gpus=16)
    write_plan(make_plan("cnn_resnet", SCRIPT, [], efa, 1, "us-east-1", catalog), tmp_path / "efa-plan")
    with FakeInstances(ec2, s3):
        report = launch(tmp_path / "efa-plan", "ec2", str(tmp_path / "efa-run.json"), 5.0, runner=backend,
                        instance_profile="srifty-profiler", s3_uri=S3_URI, yes=True, time_cap=20.0)
    (note,) = report.notes
    assert "went over TCP" in note and "EFA between the g4dn.metal nodes" in note
    assert report.to_dict()["notes"] == [note] and alive(ec2) == []


def test_a_plan_predicted_in_a_placement_group_launches_into_one(aws, catalog, tmp_path) -> None:
    """`recommend --placement-group --plan`: the prediction took the nodes in a cluster placement
    group, so the plan says so and `srifty launch --backend ec2` launches them into one."""
    from srifty.launch import launch
    from srifty.plan import make_plan, write_plan

    ec2, s3 = aws
    row = replace(Recommendation_mix(), config="2xg5.12xlarge", batch_split={"g5.12xlarge": 32.0}, gpus=8, nodes=2,
                  mixed=False)
    plan = make_plan("cnn_resnet", SCRIPT, [], row, 1, "us-east-1", catalog, placement_group=True)
    write_plan(plan, tmp_path / "plan")
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["placement_group"] is True
    assert "cluster placement group" in (tmp_path / "plan" / "README.md").read_text()
    rec = PlacementGroupsEc2(ec2)
    backend, _ = make_backend(catalog, rec)
    with FakeInstances(ec2, s3) as fake:
        launch(tmp_path / "plan", "ec2", str(tmp_path / "run.json"), 5.0, runner=backend,
               instance_profile="srifty-profiler", s3_uri=S3_URI, yes=True, time_cap=20.0)
    (call,) = rec.run_calls
    assert call["Placement"]["GroupName"].startswith("srifty-") and call["MinCount"] == 2
    assert "SRIFTY_EC2_PLACEMENT_GROUP=1" in fake.user_data["g5.12xlarge/1"]
    assert rec.groups == {} and alive(ec2) == []


def test_a_mixed_plan_is_refused_on_ec2(tmp_path, catalog) -> None:
    from srifty.launch import request_for
    from srifty.plan import make_plan

    row = Recommendation_mix()
    plan = make_plan("cnn_resnet", SCRIPT, [], row, 1, None, catalog).to_dict()
    with pytest.raises(SriftyError, match="one instance type per run"):
        request_for(plan, "ec2", 5.0)


def Recommendation_mix():
    from srifty.solver import Recommendation

    return Recommendation(config="1xg5.xlarge+1xg4dn.xlarge", market="on-demand", gpus=2, nodes=2,
                          batch_split={"g5.xlarge": 40.0, "g4dn.xlarge": 24.0}, global_batch=64.0, iteration_ms=100.0,
                          interval_ms=(60.0, 200.0), throughput_samples_per_s=640.0,
                          raw_throughput_samples_per_s=640.0, usd_per_hour=1.5, usd_per_million_samples=0.6,
                          interruptions_per_hour=0.0, source="transferred", mixed=True)


def test_the_cli_reports_every_type_s_profile(aws, catalog, tmp_path, monkeypatch) -> None:
    """`srifty profile --instance-types A,B`: one profile file per type, and the table, the JSON
    and the last line name every one of them, not only the first."""
    import srifty.api
    from srifty.cli import cli

    ec2, s3 = aws
    backend, _ = make_backend(catalog)
    monkeypatch.setattr(srifty.api, "get_backend", lambda name: backend)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    args = ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g4dn.xlarge,g5.xlarge", "--ami", ami,
            "--s3-uri", S3_URI, "--instance-profile", "srifty-profiler", "--yes", "--out", str(tmp_path / "p.json")]
    with FakeInstances(ec2, s3) as fake:
        res = CliRunner().invoke(cli, args)
        as_json = CliRunner().invoke(cli, [*args, "--json"])
    assert not fake.errors
    assert res.exit_code == 0, res.output
    files = [str(tmp_path / f"p.{t}.profile.json") for t in ("g4dn.xlarge", "g5.xlarge")]
    assert res.output.rstrip().splitlines()[-1] == f"profiles written to {files[0]}, {files[1]}"
    table = res.output[res.output.index("Training profiles"):]
    assert "g4dn.xlarge" in table and "g5.xlarge" in table
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.output[as_json.output.index("{"):as_json.output.rindex("}") + 1])
    assert [p["instance_types"] for p in doc["profiles"]] == [["g4dn.xlarge"], ["g5.xlarge"]]
    assert not (tmp_path / "p.json").exists() and alive(ec2) == []


def _vpc(ec2, cidr: str = "10.9") -> tuple[str, list[str], list[str], str]:
    """A VPC that is not the default one: (its id, two zones, a subnet in each, a security group)."""
    vpc = ec2.create_vpc(CidrBlock=f"{cidr}.0.0/16")["Vpc"]["VpcId"]
    zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]][:2]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"{cidr}.{i}.0/24", AvailabilityZone=z)["Subnet"]["SubnetId"]
               for i, z in enumerate(zones)]
    sg = ec2.create_security_group(GroupName=f"srifty-nodes-{cidr}", Description="nodes", VpcId=vpc)["GroupId"]
    return vpc, zones, subnets, sg


def test_subnets_and_security_groups_place_the_nodes(aws, catalog, tmp_path) -> None:
    """--subnet-ids / --security-group-ids: every RunInstances names a subnet (no zone of its
    own) and the groups; no capacity in the first subnet's zone moves to the next subnet; a
    subnet without public addresses on launch is said."""
    ec2, s3 = aws
    _, zones, subnets, sg = _vpc(ec2)
    rec = RecordingEc2(ec2, no_capacity_in=(zones[0],))
    backend, logs = make_backend(catalog, rec)
    with FakeInstances(ec2, s3) as fake:
        backend.profile(request(instance_types=["g5.xlarge"], subnet_ids=subnets, security_group_ids=[sg]),
                        str(tmp_path / "p.json"))
    assert not fake.errors
    assert [c["SubnetId"] for c in rec.run_calls] == subnets
    assert all(c["SecurityGroupIds"] == [sg] and "AvailabilityZone" not in c.get("Placement", {}) for c in rec.run_calls)
    launched = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert {i["SubnetId"] for i in launched} == {subnets[1]}
    assert any(f"no capacity in {zones[0]} ({subnets[0]})" in line for line in logs), logs
    assert any(f"{subnets[0]} gives instances no public address" in line for line in logs), logs
    assert json.loads((tmp_path / "p.json").read_text())["cluster"]["instance_types"] == ["g5.xlarge"]
    assert alive(ec2) == []


def test_the_config_file_s_subnets_are_the_default_and_bad_ones_are_refused(aws, catalog, tmp_path) -> None:
    """ec2.subnet_ids and ec2.security_group_ids in the config file stand in for the options (an
    account without a default VPC sets them once); a subnet that does not exist, two in one zone,
    or a group of another VPC are refused before anything is launched."""
    from srifty.cli import cli

    ec2, s3 = aws
    _, zones, subnets, sg = _vpc(ec2)
    _, _, _, other_sg = _vpc(ec2, "10.8")
    write_config(f"ec2: {{subnet_ids: [{subnets[1]}], security_group_ids: [{sg}]}}\n")
    rec = RecordingEc2(ec2)
    backend, _ = make_backend(catalog, rec)
    with FakeInstances(ec2, s3):
        backend.profile(request(instance_types=["g5.xlarge"]), str(tmp_path / "p.json"))
    assert [(c["SubnetId"], c["SecurityGroupIds"]) for c in rec.run_calls] == [(subnets[1], [sg])]
    assert alive(ec2) == []
    write_config("")
    same_zone = ec2.create_subnet(VpcId=ec2.describe_subnets(SubnetIds=[subnets[0]])["Subnets"][0]["VpcId"],
                                  CidrBlock="10.9.7.0/24", AvailabilityZone=zones[0])["Subnet"]["SubnetId"]
    for kw, message in [
        ({"subnet_ids": ["subnet-0123456789abcdef0"]}, r"The subnets to launch into \(--subnet-ids, or ec2"),
        ({"subnet_ids": [subnets[0], same_zone]}, f"are both in {zones[0]}"),
        ({"subnet_ids": subnets, "security_group_ids": [other_sg]}, f"{other_sg} not in the subnets' VPC"),
    ]:
        rec.run_calls.clear()
        with pytest.raises(SriftyError, match=message):
            make_backend(catalog, rec)[0].profile(request(instance_types=["g5.xlarge"], **kw), str(tmp_path / "q.json"))
        assert rec.run_calls == []
    res = CliRunner().invoke(cli, ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g5.xlarge",
                                   "--subnet-ids", "subnet-1,vpc-0123456789abcdef0", "--dry-run"])
    assert res.exit_code != 0
    assert "'subnet-1', 'vpc-0123456789abcdef0' are not IDs like subnet-0123456789abcdef0" in str(res.exception)
    res = CliRunner().invoke(cli, ["profile", SCRIPT, "--backend", "ec2", "--instance-types", "g5.xlarge",
                                   "--subnet-ids", f"{subnets[0]},{subnets[1]}", "--security-group-ids", sg,
                                   "--ami", "ami-0123456789", "--s3-uri", S3_URI, "--dry-run"])
    assert res.exit_code == 0, res.output
    (req,) = json.loads(res.output[: res.output.index("\n# user data")])["run_instances"]
    assert req["SubnetId"] == subnets[0] and req["SecurityGroupIds"] == [sg] and "AvailabilityZone" not in req["Placement"]
