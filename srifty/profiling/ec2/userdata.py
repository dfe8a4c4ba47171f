"""The boot script each instance runs (its user data): fetch the rendezvous, install srifty and
the requirements, unpack the project, run ``srifty profile`` in node mode, upload the profile
(or a failure marker) and the logs, and shut down.

It holds no credentials: S3 access comes from the instance profile. The instance shuts itself
down after the time cap even if the launcher is gone, and a shut-down instance terminates.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
from typing import Callable

from srifty.profiling.ec2.plans import RunSetup
from srifty.profiling.ec2.staging import requirements_file
from srifty.profiling.launcher import ProfileRequest
from srifty.profiling.project_bundle import INSTANCE_ROOT, ProjectBundle, unpack_command


def user_data(request: ProfileRequest, instance_type: str, setup: RunSetup, keys: dict[str, str], nproc: int,
              market: str, region: str, time_cap_s: float, boot_overhead_s: float) -> str:
    """The boot script: no credentials in it; S3 access comes from the instance profile."""
    q = shlex.quote
    s3 = lambda key: q(f"s3://{setup.loc.bucket}/{key}")  # noqa: E731
    run_id = setup.run_id
    # the instance shuts itself down (and so terminates) after the time cap even if the launcher is gone
    self_destruct_min = int((time_cap_s + boot_overhead_s) // 60) + 5
    lines = [
        "#!/bin/bash",
        f"# srifty run {run_id}: profile on {instance_type} ({market}); no credentials here,",
        "# S3 access comes from the instance profile.",
        "set -uo pipefail",
        "exec > >(tee -a /var/log/srifty-user-data.log) 2>&1",
        f"shutdown -h +{self_destruct_min} 'srifty time cap' || true",
        f"export AWS_DEFAULT_REGION={q(region)}",
        "mkdir -p /opt/srifty && cd /opt/srifty",
        "TOKEN=$(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 600')",
        "MYIP=$(curl -s -H \"X-aws-ec2-metadata-token: $TOKEN\" http://169.254.169.254/latest/meta-data/local-ipv4)",
        f"until aws s3 cp {s3(keys['rendezvous'])} rendezvous.json; do sleep 5; done",
        "NODE_RANK=$(python3 -c \"import json,sys; print(json.load(open('rendezvous.json'))['node_ips'].index(sys.argv[1]))\" \"$MYIP\")",
        "fail() { [ \"$NODE_RANK\" = 0 ] && printf '{\"stage\": \"%s\"}' \"$1\" > failed.json && "
        f"aws s3 cp failed.json {s3(keys['failed'])}; "
        f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log; shutdown -h now; exit 1; }}",
        f"aws s3 cp {s3(keys['source'])} src.tar.gz && {unpack_command('src.tar.gz', 'src')} || fail download",
        "python3 -m venv --system-site-packages venv && venv/bin/pip install -q ./src || fail install",
    ]
    if setup.bundle is not None:
        lines.append(f"aws s3 cp {s3(keys['project'])} project.tar.gz && "
                     f"{unpack_command('project.tar.gz')} || fail download-project")
    lines += requirements_lines(request, setup.bundle, keys, s3)
    lines += [
        "export SRIFTY_EC2_NODE=1 SRIFTY_EC2_NODE_RANK=$NODE_RANK",
        "export SRIFTY_EC2_NNODES=$(python3 -c \"import json; print(len(json.load(open('rendezvous.json'))['node_ips']))\")",
        "export SRIFTY_EC2_MASTER=$(python3 -c \"import json; print(json.load(open('rendezvous.json'))['master_addr'])\")",
        "export SRIFTY_EC2_NODE_IPS=$(python3 -c \"import json; print(','.join(json.load(open('rendezvous.json'))['node_ips']))\")",
        f"export SRIFTY_EC2_RDZV_ID={q(run_id)} SRIFTY_EC2_REGION={q(region)} SRIFTY_EC2_MARKET={q(market)} "
        f"SRIFTY_EC2_PLACEMENT_GROUP={int(bool(request.placement_group))}",
        f"{profile_command(request, instance_type, setup.bundle, nproc)}; STATUS=$?",
        "if [ \"$NODE_RANK\" = 0 ]; then",
        f"  if [ -s /opt/srifty/profile.json ]; then aws s3 cp /opt/srifty/profile.json {s3(keys['profile'])} --sse AES256;",
        "  else printf '{\"stage\": \"profile\", \"status\": %s}' \"$STATUS\" > failed.json; "
        f"aws s3 cp failed.json {s3(keys['failed'])}; fi",
        "fi",
        f"aws s3 cp /var/log/srifty-user-data.log {s3(keys['logs'])}/node$NODE_RANK.log",
        "shutdown -h now",
    ]
    return "\n".join(lines) + "\n"


def requirements_lines(request: ProfileRequest, bundle: ProjectBundle | None, keys: dict[str, str],
                       s3: Callable[[str], str]) -> list[str]:
    """Install the requirements: in place when the file is in the project (its ``-r other.txt``
    and ``./pkg`` lines then resolve as they do here), else from its uploaded copy."""
    req = requirements_file(request, bundle)
    if req is None:
        return []
    pip = "/opt/srifty/venv/bin/pip install -q -r"
    rel = bundle.relative(req) if bundle is not None else None
    if keys.get("requirements") or rel is None:
        return [f"aws s3 cp {s3(keys['requirements'])} requirements.txt && {pip} requirements.txt || fail requirements"]
    folder, name = posixpath.split(rel)
    where = posixpath.join(INSTANCE_ROOT, folder) if folder else INSTANCE_ROOT
    return [f"(cd {shlex.quote(where)} && {pip} {shlex.quote(name)}) || fail requirements"]


def profile_command(request: ProfileRequest, instance_type: str, bundle: ProjectBundle | None, nproc: int) -> str:
    """``srifty profile`` as the node runs it: in the project, from where it was started here."""
    q = shlex.quote
    opts = [
        "--backend", "ec2", "--nproc", str(nproc), "--instance-type", instance_type,
        "--max-seconds", str(request.max_seconds), "--max-iterations", str(request.max_iterations),
        "--min-iterations", str(request.min_iterations), "--target-ci", str(request.target_rel_ci),
        "--hang-timeout", str(request.hang_timeout), "--startup-timeout", str(request.startup_timeout),
        "--device", request.device, "--out", "/opt/srifty/profile.json",
    ]
    if request.batch_size:
        opts += ["--batch-size", str(request.batch_size)]
        if request.batch_arg:  # as one word: the option's name starts with dashes
            opts += [f"--batch-arg={request.batch_arg}"]
    if request.model_name or request.script:
        opts += ["--model-name", request.model]
    if bundle is None:  # --collectives
        opts += ["--collectives", "--world-sizes", ",".join(map(str, request.world_sizes or [nproc])),
                 "--max-bytes", str(request.max_bytes), "--repeats", str(request.repeats)]
        return " ".join(q(x) for x in ["/opt/srifty/venv/bin/srifty", "profile", *opts])
    cwd, script = bundle.run_location()
    target = ["--module", request.module] if request.module else [script]  # a module runs from cwd, as here
    cmd = " ".join(q(x) for x in ["/opt/srifty/venv/bin/srifty", "profile", *target, *opts])
    if request.script_args:
        cmd += " -- " + " ".join(q(a) for a in request.script_args)
    return f"(mkdir -p {q(cwd)} && cd {q(cwd)} && {cmd})"


def decode_user_data(b64: str) -> str:
    return base64.b64decode(b64).decode()
