"""The EC2 instance catalog: shipped snapshot, queries, CLI, refresh against moto, emulated YAML."""

from __future__ import annotations

import csv
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from srifty import catalog as cat_mod
from srifty.catalog import (
    CATALOG_COLUMNS,
    Catalog,
    InterruptionBucket,
    Market,
    SpotStatistic,
    did_you_mean,
    monthly_share_to_hourly_rate,
)
from srifty.cli import cli
from srifty.errors import SriftyError

DATA = cat_mod.DATA_DIR
ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "catalog"


def read(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """No test reads or writes the real user cache, or a catalog from the environment."""
    monkeypatch.setenv("SRIFTY_CATALOG_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SRIFTY_CATALOG", raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def snap() -> Catalog:
    return Catalog.snapshot()


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_has_documented_columns_and_rows(snap):
    df = snap.df
    assert list(df.columns[: len(CATALOG_COLUMNS)]) == CATALOG_COLUMNS
    meta = cat_mod.snapshot_meta()
    assert len(df) == meta["rows"]["ec2_catalog.csv"]
    assert df["instance_type"].nunique() == meta["rows"]["instance_types"]
    # one row per (instance type, region)
    assert not df.duplicated(["instance_type", "region"]).any()
    families = set(df["family"])
    assert {"p3", "p4d", "p5", "g4dn", "g5", "g6e", "c5", "c6i", "trn1"} <= families


def test_ondemand_and_spot_prices_match_the_per_zone_copy(snap):
    zones = [r for r in read("ec2_spot_prices.csv") if r["instance_type"] == "p3.2xlarge" and r["region"] == "us-east-1"]
    ondemand = {float(r["ondemand_usd_per_hour"]) for r in zones}
    assert len(ondemand) == 1
    assert snap.ondemand_price("p3.2xlarge", "us-east-1") == ondemand.pop()
    spot = [float(r["spot_usd_per_hour"]) for r in zones if r["spot_usd_per_hour"]]
    assert snap.spot_price("p3.2xlarge", "us-east-1") == min(spot)
    assert snap.spot_price("p3.2xlarge", "us-east-1", SpotStatistic.MEDIAN) == pytest.approx(statistics.median(spot))
    assert snap.price("p3.2xlarge", Market.SPOT, "us-east-1") == min(spot)
    assert snap.get("p3.2xlarge").price_in("us-east-1").spot_zones == len(spot)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data not present (fresh clone)")
def test_known_values_against_the_shared_source_files(snap):
    with (SHARED / "aws_gpu_instance_catalog_merged.csv").open() as f:
        merged = {r["instance_type"]: r for r in csv.DictReader(f)}
    p3 = merged["p3.2xlarge"]
    assert snap.ondemand_price("p3.2xlarge", "us-east-1") == float(p3["ondemand_us-east-1"])
    assert snap.spot_price("p3.2xlarge", "us-west-2") == float(p3["spot_min_us-west-2"])
    assert snap.spot_price("p3.2xlarge", "us-west-2", "median") == pytest.approx(float(p3["spot_median_us-west-2"]), abs=1e-4)
    with (SHARED / "skypilot_v8_aws_gfamily_transcribed.csv").open() as f:
        g = [r for r in csv.DictReader(f) if r["InstanceType"] == "g4dn.12xlarge" and r["Region"] == "us-west-2"]
    assert snap.spot_price("g4dn.12xlarge", "us-west-2") == min(float(r["SpotPrice"]) for r in g if r["SpotPrice"])
    # c5 on-demand comes from Karpenter's us-east-1 pricing
    assert snap.ondemand_price("c5.large", "us-east-1") == float(merged["c5.large"]["ondemand_usd_per_hr_us_east_1"])


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data not present (fresh clone)")
def test_build_script_reproduces_the_shipped_snapshot(tmp_path):
    out = tmp_path / "data"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_catalog.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for name in ("ec2_catalog.csv", "ec2_spot_prices.csv", "ec2_spot_interruption.csv", "gpu_specs.csv",
                 "ec2_gpu_interconnect.csv", "snapshot.json"):
        assert (out / name).read_bytes() == (DATA / name).read_bytes(), name


def test_g4dn_12xlarge_has_four_t4(snap):
    it = snap.get("g4dn.12xlarge")
    assert (it.gpu_name, it.gpu_count, it.workers_per_node) == ("T4", 4, 4)
    assert it.network_gbps == 50 and it.network_up_to_gbps is None and it.efa_interfaces == 1
    assert "PCIe" in it.intra_node_link


def test_up_to_bandwidth_keeps_the_baseline_unknown(snap):
    it = snap.get("p3.2xlarge")
    assert it.network_gbps is None
    assert it.network_up_to_gbps == 10.0
    # where a source states a baseline (Karpenter / EC2 API), it is kept beside the "up to" figure
    g = snap.get("g4dn.xlarge")
    assert (g.network_gbps, g.network_up_to_gbps) == (5.0, 25.0)


def test_interconnect_family_rows_are_expanded(snap):
    rows = {r["instance_type"]: r for r in read("ec2_gpu_interconnect.csv")}
    assert rows["g5.4xlarge"]["network_up_to_gbps"] == "25"
    assert rows["g5.8xlarge"]["network_gbps_stated"] == "25"
    assert rows["g5.8xlarge"]["efa"].startswith("yes")
    assert snap.get("p4d.24xlarge").intra_node_bandwidth_gbytes_per_s == 600


def test_gpu_names_are_normalised_and_specs_found(snap):
    assert snap.get("p4de.24xlarge").gpu_name == "A100-80GB"
    assert snap.get("p3dn.24xlarge").gpu_name == "V100-32GB"
    spec = snap.gpu_spec("A100-80GB")
    assert spec is not None and spec.spec_name == "A100 (80GB SXM4)"
    rows = {r["spec_name"]: r for r in read("gpu_specs.csv")}
    assert spec.memory_bandwidth_gbytes_per_s == float(rows["A100 (80GB SXM4)"]["memory_bandwidth_gbytes_per_s"])
    assert spec.source
    assert snap.gpu_spec("Trainium").fp16_bf16_tensor_tflops_dense == float(rows["Trainium (trn1)"]["fp16_bf16_tensor_tflops_dense"])
    assert snap.gpu_spec("B300") is None  # no source in gpu_specs.csv


def test_trainium_uses_accelerator_fields(snap):
    it = snap.get("trn1.32xlarge")
    assert (it.gpu_name, it.gpu_count, it.accelerator_name, it.accelerator_count) == ("", 0, "Trainium", 16)
    assert snap.names(gpu="trainium") == ["trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge"]


# ----------------------------------------------------------------------------- queries


def test_filters(snap):
    t4 = snap.names(gpu="t4")
    assert t4 and all(n.startswith("g4dn.") for n in t4)
    assert snap.names(family="g5") == snap.names(name_glob="g5.*")
    assert snap.names(name_glob="g5.*")[:3] == ["g5.xlarge", "g5.2xlarge", "g5.4xlarge"]  # size order
    in_tokyo = snap.names(region="ap-northeast-1")
    assert in_tokyo and all(n.startswith("p") for n in in_tokyo)
    assert set(snap.names(gpu="V100", region="us-west-2")) == {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge"}
    assert snap.names(family="c6i")  # CPU-only types can be priced
    assert snap.ondemand_price("c6i.xlarge", "us-east-1") is not None


def test_unknown_names_say_did_you_mean(snap):
    with pytest.raises(SriftyError, match=r"Did you mean 'p3.8xlarge'"):
        snap.get("p3.8xlarj")
    with pytest.raises(SriftyError, match="Did you mean 'V100'"):
        snap.list(gpu="V10O")
    with pytest.raises(SriftyError, match=r"Did you mean 'g5.xlarge'"):  # EC2's names are lower case
        snap.get("G5.XLARGE")
    assert did_you_mean("G5", ["g5", float("nan"), "p3"]) == " Did you mean 'g5'?"  # a column's blanks name nothing
    with pytest.raises(SriftyError, match="no prices in region"):
        snap.list(region="mars-1")


def test_missing_prices_are_none_not_zero(snap):
    assert snap.ondemand_price("p3.2xlarge", "sa-east-1") is None
    assert snap.spot_price("p2.xlarge", "us-east-1") is None  # no p2/g3 spot data
    assert snap.interruption_rate("p3.2xlarge", "eu-west-1") is None  # advisor covers us-east-1/us-west-2


def test_interruption_bucket_to_rate():
    over20 = InterruptionBucket.from_label(">20%")
    assert over20.rate_per_hour == pytest.approx(-math.log(1 - 0.25) / 730)
    assert InterruptionBucket.UNDER_5.rate_per_hour == pytest.approx(-math.log(1 - 0.025) / 730)
    rates = [b.rate_per_hour for b in InterruptionBucket]
    assert rates == sorted(rates)
    with pytest.raises(SriftyError):
        InterruptionBucket.from_label("30%")


@given(st.floats(min_value=0.0, max_value=0.99))
def test_hourly_rate_reproduces_the_monthly_share(share):
    rate = monthly_share_to_hourly_rate(share)
    assert 1 - math.exp(-rate * 730) == pytest.approx(share, abs=1e-9)


def test_interruption_rates_come_from_the_advisor_file(snap):
    rows = [r for r in read("ec2_spot_interruption.csv") if r["commit"].startswith("4105b47a")]
    r = next(r for r in rows if r["instance_type"] == "g5.xlarge" and r["region"] == "us-east-1")
    assert snap.get("g5.xlarge").price_in("us-east-1").interruption_bucket == r["interruption_bucket"]
    assert snap.interruption_rate("g5.xlarge", "us-east-1") == InterruptionBucket.from_label(r["interruption_bucket"]).rate_per_hour


def test_older_advisor_snapshot_can_be_chosen(snap):
    old = Catalog.snapshot(advisor_commit="5bdc33ce")
    rows = [r for r in read("ec2_spot_interruption.csv") if r["commit"].startswith("5bdc33ce")]
    differ = 0
    for r in rows:
        p = old.get(r["instance_type"]).price_in(r["region"])
        assert p.interruption_bucket == r["interruption_bucket"]
        differ += p.interruption_bucket != snap.get(r["instance_type"]).price_in(r["region"]).interruption_bucket
    assert differ > 0
    with pytest.raises(SriftyError, match="Spot Advisor snapshot"):
        Catalog.snapshot(advisor_commit="deadbeef")


def test_snapshot_warns_with_its_age():
    c = Catalog.default()
    assert c.source.kind == "snapshot"
    assert any("days old" in w and cat_mod.snapshot_meta()["prices_as_of"] in w for w in c.warnings)


# ----------------------------------------------------------------------------- CLI


def test_cli_list_json_and_table():
    r = CliRunner().invoke(cli, ["catalog", "list", "--gpu", "T4", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    names = [x["instance_type"] for x in doc["instance_types"]]
    assert names == Catalog.snapshot().names(gpu="T4")
    g = next(x for x in doc["instance_types"] if x["instance_type"] == "g4dn.12xlarge")
    assert g["gpu_count"] == 4 and g["ondemand_usd_per_hour"] == Catalog.snapshot().ondemand_price("g4dn.12xlarge")
    r = CliRunner().invoke(cli, ["catalog", "list", "--family", "g5", "--region", "us-west-2"])
    assert r.exit_code == 0 and "g5.48xlarge" in r.stdout and "us-west-2" in r.stdout
    r = CliRunner().invoke(cli, ["catalog", "list", "--instance-types", "p4*", "--csv"])
    assert r.exit_code == 0
    assert [row["instance_type"] for row in csv.DictReader(r.stdout.splitlines())] == ["p4d.24xlarge", "p4de.24xlarge"]


def test_cli_show_json_and_unknown():
    r = CliRunner().invoke(cli, ["catalog", "show", "p3.8xlarge", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["instance_type"]["gpu_count"] == 4 and doc["gpu_spec"]["spec_name"] == "V100"
    regions = [p["region"] for p in doc["instance_type"]["prices"]]
    assert "us-east-1" in regions
    # V100's measured speed factors (srifty/data/gpu_speed_corrections.csv); T4 has none
    shipped = {(c.gpu_name, c.flops): c.factor for c in Catalog.default().speed_corrections}
    assert doc["gpu_speed_factors"] == {"fp16": shipped[("V100", "fp16")], "fp32": shipped[("V100", "fp32")]}
    conv = {(c.gpu_name, c.flops): c.conv_factor for c in Catalog.default().speed_corrections}
    assert doc["gpu_speed_conv_factors"] == {"fp16": conv[("V100", "fp16")], "fp32": conv[("V100", "fp32")]}
    r = CliRunner().invoke(cli, ["catalog", "show", "g4dn.xlarge", "--json"])
    assert json.loads(r.stdout)["gpu_speed_factors"] == {}
    r = CliRunner().invoke(cli, ["catalog", "show", "p6-b200.48xlarge"])
    assert f"FP16 ×{shipped[('B200', 'fp16')]:.2f}" in r.stdout
    r = CliRunner().invoke(cli, ["catalog", "show", "p3.8xlarj"])
    assert r.exit_code != 0 and isinstance(r.exception, SriftyError)
    assert "Did you mean" in str(r.exception)


def test_help_does_not_import_heavy_modules():
    code = ("import sys; from srifty.cli import main\n"
            "for args in (['--help'], ['catalog', '--help']):\n"
            "    try: main(args)\n"
            "    except SystemExit: pass\n"
            "bad = [m for m in ('boto3', 'pandas', 'torch', 'sklearn') if m in sys.modules]\n"
            "print('HEAVY', bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    assert "catalog" in out.stdout


# ----------------------------------------------------------------------------- refresh against moto


@pytest.fixture(scope="module")
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def fake_aws(moto_endpoint, monkeypatch):
    for k, v in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_MAX_ATTEMPTS": "1"}.items():  # moto answers 500 for the Pricing API: no retries
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_endpoint


def test_refresh_against_moto_writes_a_catalog_and_degrades_without_pricing(fake_aws, isolated_cache):
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    api_types = {t["InstanceType"]: t for t in ec2.describe_instance_types(
        InstanceTypes=["g4dn.12xlarge", "g4dn.xlarge"])["InstanceTypes"]}
    r = CliRunner().invoke(cli, ["catalog", "refresh", "--region", "us-east-1", "--json"])
    assert r.exit_code == 0, (r.output, r.exception)
    # the in-process moto server prints its own notes on stdout: read from the JSON document on
    summary = json.loads(r.stdout[r.stdout.index("{\n"):])
    assert summary["instance_types"] > 0 and summary["spot_prices"] > 0
    # moto has no Pricing API: on-demand prices are kept from the snapshot, and the user is told
    assert summary["ondemand_from_pricing_api"] == 0
    assert any("Pricing API" in w and "kept" in w for w in summary["warnings"])
    assert "Pricing API" in r.stderr

    meta = json.loads((isolated_cache / cat_mod.CACHE_META).read_text())
    assert meta["sha256"] == cat_mod.file_sha256(isolated_cache / "ec2_catalog.csv")
    c = Catalog.default()
    assert c.source.kind == "refreshed" and c.source.fetched_at == meta["fetched_at"]
    g = c.get("g4dn.12xlarge")
    spec = api_types["g4dn.12xlarge"]
    assert g.vcpus == spec["VCpuInfo"]["DefaultVCpus"]
    assert g.gpu_count == spec["GpuInfo"]["Gpus"][0]["Count"] and g.gpu_name == "T4"
    p = g.price_in("us-east-1")
    assert p.ondemand_usd_per_hour == Catalog.snapshot().ondemand_price("g4dn.12xlarge", "us-east-1")
    assert p.ondemand_source.startswith("kept:")
    moto_spot = [float(s["SpotPrice"]) for s in ec2.describe_spot_price_history(InstanceTypes=["g4dn.12xlarge"])["SpotPriceHistory"]]
    assert p.spot_min_usd_per_hour == min(moto_spot) and p.spot_zones == len(moto_spot)
    assert p.interruption_bucket == Catalog.snapshot().get("g4dn.12xlarge").price_in("us-east-1").interruption_bucket
    assert c.get("g4dn.12xlarge").intra_node_link == Catalog.snapshot().get("g4dn.12xlarge").intra_node_link
    # other regions are kept from the snapshot
    assert c.ondemand_price("p3.8xlarge", "eu-west-1") == Catalog.snapshot().ondemand_price("p3.8xlarge", "eu-west-1")
    # "up to" network from the API: baseline from the network card, burst figure separate
    x = c.get("g4dn.xlarge")
    assert x.network_up_to_gbps == 25.0 and x.network_gbps == api_types["g4dn.xlarge"]["NetworkInfo"]["NetworkCards"][0]["BaselineBandwidthInGbps"]


def test_refresh_never_overwrites_an_edited_catalog(fake_aws, isolated_cache):
    cat_mod.refresh_catalog(["us-east-1"])
    path = isolated_cache / "ec2_catalog.csv"
    path.write_text(path.read_text().replace("g4dn.12xlarge", "g4dn.12xlarge", 1) + "\n")
    edited = path.read_bytes()
    r = CliRunner().invoke(cli, ["catalog", "refresh", "--region", "us-east-1"])
    assert r.exit_code != 0 and isinstance(r.exception, SriftyError)
    assert "--force" in str(r.exception)
    assert path.read_bytes() == edited
    assert any("edited" in w for w in Catalog.default().warnings)
    r = CliRunner().invoke(cli, ["catalog", "refresh", "--region", "us-east-1", "--force"])
    assert r.exit_code == 0, r.output
    assert json.loads((isolated_cache / cat_mod.CACHE_META).read_text())["sha256"] == cat_mod.file_sha256(path)


def test_refresh_with_injected_clients_and_pricing(fake_aws, isolated_cache):
    """A pricing client that answers is used for on-demand prices (the moto-less path of GetProducts)."""
    import boto3

    class FakePaginator:
        def __init__(self, pages):
            self.pages = pages

        def paginate(self, **kwargs):
            assert kwargs["ServiceCode"] == "AmazonEC2"
            itype = next(f["Value"] for f in kwargs["Filters"] if f["Field"] == "instanceType")
            return [{"PriceList": [json.dumps(p) for p in self.pages.get(itype, [])]}]

    class FakePricing:
        def get_paginator(self, op):
            assert op == "get_products"
            product = {"product": {"attributes": {"instanceType": "g5.xlarge", "regionCode": "us-east-1"}},
                       "terms": {"OnDemand": {"X": {"priceDimensions": {"Y": {"pricePerUnit": {"USD": "1.2345"}}}}}}}
            return FakePaginator({"g5.xlarge": [product]})

    result = cat_mod.refresh_catalog(["us-east-1"], ec2_clients={"us-east-1": boto3.client("ec2", region_name="us-east-1")},
                                     pricing_client=FakePricing())
    assert result.ondemand_from_api == 1 and not result.warnings
    c = Catalog.default()
    assert c.ondemand_price("g5.xlarge", "us-east-1") == 1.2345
    assert c.get("g5.xlarge").price_in("us-east-1").ondemand_source == "aws-pricing-api"


# ----------------------------------------------------------------------------- emulated catalogs

EMULATED = """\
schema: 1
name: emulated
region: local
instance_types:
  emu.small:
    cpu_share: 0.25
    workers: 1
    bandwidth_mbit: 200
    latency_ms: 0
    price_per_hour: 0.10
    spot_price_per_hour: 0.04
    interruption_per_hour: 0.02
    family: emu
  emu.large:
    cpu_share: 1.0
    workers: 2
    bandwidth_mbit: 1000
    price_per_hour: 0.35
"""


def test_emulated_catalog_from_yaml(tmp_path):
    path = tmp_path / "emulated.yaml"
    path.write_text(EMULATED)
    c = Catalog.from_emulated_spec(path)
    assert c.source.kind == "emulated" and c.default_region == "local"
    small = c.get("emu.small")
    assert (small.vcpus, small.network_gbps, small.gpu_name, small.gpu_count) == (0.25, 0.2, "", 0)
    assert small.workers_per_node == 1 and small.emulation.bandwidth_mbit == 200
    assert c.ondemand_price("emu.small") == 0.10 and c.spot_price("emu.small") == 0.04
    assert c.interruption_rate("emu.small") == 0.02
    large = c.get("emu.large")
    assert large.workers_per_node == 2 and large.family == "emu" and c.spot_price("emu.large") is None
    assert c.names(family="emu") == ["emu.small", "emu.large"]  # size order: small before large
    r = CliRunner().invoke(cli, ["catalog", "--catalog", str(path), "list", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["source"] == "emulated" and {x["instance_type"] for x in doc["instance_types"]} == {"emu.small", "emu.large"}


@pytest.mark.parametrize("text, message", [
    ("schema: 2\ninstance_types: {}\n", "schema 1"),
    ("schema: 1\ninstance_types:\n  emu.x: {cpu_share: 1, workers: 1, bandwidth_mbit: 10}\n", "lacks price_per_hour"),
    ("schema: 1\ninstance_types:\n  emu.x: {cpu_share: 1, workers: 1, bandwidth_mbit: 10, price_per_hour: 1, bandwith: 3}\n",
     "unknown fields bandwith"),
    ("schema: 1\ninstance_types:\n  emu.x: {cpu_share: -1, workers: 1, bandwidth_mbit: 10, price_per_hour: 1}\n", "non-negative"),
    ("schema: 1\ninstance_types:\n  emu.x: !!python/object:os.system {}\n", "not valid YAML"),
])
def test_emulated_yaml_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SriftyError, match=message):
        Catalog.from_emulated_spec(path)
