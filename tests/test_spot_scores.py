"""`recommend --spot-scores`: AWS's spot placement scores of the ranked rows' spot groups, read
through EC2 GetSpotPlacementScores. moto 5.2 does not serve that call, so a real boto3 ec2
client answers from recorded responses through botocore's Stubber, which checks every request
and every answer against the EC2 API's own model."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from srifty import api, solver
from srifty.capacity import LOW_SPOT_SCORE, MAX_SPOT_SCORE_QUERIES, SpotScore, read_spot_scores, spot_groups
from srifty.configspec import parse_config
from srifty.errors import SriftyError
from tests.conftest import ROOT, run_srifty

PROFILE = str(ROOT / "profiles" / "local" / "cnn_resnet.json")
REGION = "us-east-1"


def ec2_client() -> object:
    return boto3.session.Session(region_name=REGION, aws_access_key_id="testing",
                                 aws_secret_access_key="testing").client("ec2")


def request(instance_type: str, nodes: int) -> dict:
    return {"InstanceTypes": [instance_type], "TargetCapacity": nodes, "TargetCapacityUnitType": "units",
            "SingleAvailabilityZone": False, "RegionNames": [REGION]}


def answer(score: int) -> dict:
    # as EC2 answers a request for the region as a whole: one entry per region asked, no zone
    return {"SpotPlacementScores": [{"Region": REGION, "Score": score}]}


def test_each_spot_group_is_scored_once_for_the_region() -> None:
    configs = ["4xp4d.24xlarge@spot", "4xp4d.24xlarge:7@spot", "3xg4dn.metal@spot+1xp4d.24xlarge@spot",
               "2xg5.xlarge", "3xg4dn.metal@spot"]
    groups = spot_groups(configs)
    assert groups == [("p4d.24xlarge", 4), ("g4dn.metal", 3), ("p4d.24xlarge", 1)]  # on demand never; once each
    assert len(spot_groups([f"{n}xg5.xlarge@spot" for n in range(1, 20)])) == MAX_SPOT_SCORE_QUERIES
    client = ec2_client()
    with Stubber(client) as stub:
        stub.add_response("get_spot_placement_scores", answer(2), request("p4d.24xlarge", 4))
        # another region's entry is not this region's score
        stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": [
            {"Region": "us-west-2", "Score": 9}, {"Region": REGION, "Score": 7}]}, request("g4dn.metal", 3))
        stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": []}, request("p4d.24xlarge", 1))
        scores = read_spot_scores(client, REGION, groups)
        stub.assert_no_pending_responses()
    assert scores == [SpotScore("p4d.24xlarge", 4, REGION, 2), SpotScore("g4dn.metal", 3, REGION, 7),
                      SpotScore("p4d.24xlarge", 1, REGION, None)]
    assert [s.low for s in scores] == [True, False, False] and LOW_SPOT_SCORE >= 2


def test_recommend_scores_its_rows_and_a_low_chosen_group_says_what_to_ask_instead() -> None:
    cons = solver.Constraints(budget_per_hour=12)
    plain = api.recommend([PROFILE], cons, top=3)
    groups = spot_groups(r.config for r in plain.result.recommendations)
    chosen = [(g.instance_type, g.count) for g in parse_config(plain.result.chosen.config).groups if g.spot]
    assert chosen and chosen[0] in groups
    client = ec2_client()
    with Stubber(client) as stub:
        for t, n in groups:  # the chosen row's groups score 2, the others 8
            stub.add_response("get_spot_placement_scores", answer(2 if (t, n) in chosen else 8), request(t, n))
        outcome = api.recommend([PROFILE], cons, top=3, spot_scores=True, ec2_client=client)
        stub.assert_no_pending_responses()
    assert [r.config for r in outcome.result.recommendations] == [r.config for r in plain.result.recommendations]
    assert outcome.row_spot_score(outcome.result.chosen.config) == 2
    t, n = chosen[0]
    sentence = outcome.spot_score_sentence()
    assert f"{n} x {t} 2" in sentence and f"--available {t}@spot={n - 1}" in sentence and "--no-spot" in sentence
    # what the sentence proposes is a valid limit, and under it the chosen row no longer needs that many
    smaller = api.recommend([PROFILE], cons, top=3, available=f"{t}@spot={n - 1}")
    assert all(g.count <= n - 1 for r in smaller.result.recommendations
               for g in parse_config(r.config).groups if g.spot and g.instance_type == t)


def test_a_refused_score_is_a_warning_and_the_ranking_stands() -> None:
    cons = solver.Constraints(budget_per_hour=12)
    client = ec2_client()
    said: list[str] = []
    with Stubber(client) as stub:
        stub.add_client_error("get_spot_placement_scores", "UnauthorizedOperation",
                              "You are not authorized to perform this operation.")
        outcome = api.recommend([PROFILE], cons, top=3, spot_scores=True, ec2_client=client, say=said.append)
    assert outcome.spot_scores is None and outcome.spot_score_sentence() is None
    assert any("ec2:GetSpotPlacementScores" in s and "The ranking stands" in s for s in said), said
    with Stubber(client) as stub:
        stub.add_client_error("get_spot_placement_scores", "MaxConfigLimitExceeded", "Too many configurations.")
        with pytest.raises(SriftyError, match="in 24 hours"):
            read_spot_scores(client, REGION, [("g5.xlarge", 2)])


def test_spot_scores_need_the_ec2_catalog_and_spot_rows() -> None:
    res = run_srifty("recommend", "--profile", str(ROOT / "profiles/emulated/cnn_resnet"), "--catalog",
                     str(ROOT / "configs/emulated.yaml"), "--budget", "1", "--spot-scores")
    assert res.returncode == 1 and "catalog is emulated" in res.stderr and "Traceback" not in res.stderr
    # on demand only: nothing to ask AWS, so no client is made and no credentials are needed
    res = run_srifty("recommend", "--profile", PROFILE, "--budget", "12", "--top", "2", "--no-spot", "--spot-scores",
                     "--json")
    assert res.returncode == 0, res.stderr
    assert "nothing was asked of AWS" in res.stderr and "spot_placement_scores" not in json.loads(res.stdout)


class RecordedEc2Endpoint:
    """A local HTTP endpoint that answers EC2's GetSpotPlacementScores as EC2 does on the wire
    (query request, XML answer), from recorded scores: for the command itself, which makes its
    own boto3 client (pointed here with AWS_ENDPOINT_URL_EC2)."""

    XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<GetSpotPlacementScoresResponse '
           'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>{rid}</requestId><spotPlacementScoreSet>'
           '<item><region>{region}</region><score>{score}</score></item></spotPlacementScoreSet>'
           '</GetSpotPlacementScoresResponse>')

    def __init__(self, scores: dict[tuple[str, int], int]) -> None:
        import threading
        import urllib.parse
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[dict[str, str]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                form = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
                endpoint.requests.append(form)
                key = (form.get("InstanceType.1", ""), int(form.get("TargetCapacity", 0)))
                ok = form.get("Action") == "GetSpotPlacementScores" and key in scores
                text = (endpoint.XML.format(rid=len(endpoint.requests), region=form.get("RegionName.1"),
                                            score=scores[key]) if ok else
                        "<Response><Errors><Error><Code>InvalidParameterValue</Code><Message>not recorded"
                        "</Message></Error></Errors></Response>")
                data = text.encode()
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_command_reads_the_scores_from_ec2_and_shows_them(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["recommend", "--profile", PROFILE, "--budget", "12", "--top", "3"]
    plain = json.loads(run_srifty(*base, "--json").stdout)["recommendations"]
    groups = spot_groups(r["config"] for r in plain)
    endpoint = RecordedEc2Endpoint({g: 2 if i == 0 else 8 for i, g in enumerate(groups)})
    try:
        for k, v in {"AWS_ENDPOINT_URL_EC2": endpoint.url, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}.items():
            monkeypatch.setenv(k, v)
        res = run_srifty(*base, "--json", "--spot-scores")
        table = run_srifty(*base, "--spot-scores")
    finally:
        endpoint.close()
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [s["score"] for s in doc["spot_placement_scores"]] == [2] + [8] * (len(groups) - 1)
    assert doc["recommendations"][0]["spot_placement_score"] == 2
    asked = [(r["InstanceType.1"], int(r["TargetCapacity"]), r["RegionName.1"], r["SingleAvailabilityZone"])
             for r in endpoint.requests[:len(groups)]]
    assert asked == [(t, n, REGION, "false") for t, n in groups]
    assert table.returncode == 0, table.stderr
    assert "spot score" in table.stdout and "2/10" in table.stdout
    assert "spot: spot placement scores in us-east-1" in table.stderr and "--no-spot" in table.stderr
