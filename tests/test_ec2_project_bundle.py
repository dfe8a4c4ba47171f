"""The project an EC2 run ships (srifty/profiling/project_bundle.py), without AWS.

What the instance unpacks must run: the slow test builds the bundle of examples/cnn_resnet.py,
unpacks it with the very command the user data runs, and profiles the script there for real,
from the directory the user data would start it in.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from srifty.catalog import Catalog
from srifty.errors import SriftyError
from srifty.profiling.ec2 import Ec2Backend, RunSetup, S3Location
from srifty.profiling.launcher import ProfileRequest
from srifty.profiling.project_bundle import INSTANCE_ROOT, MB, ProjectBundle, collect, unpack_command

from conftest import EXAMPLES, ROOT, run_srifty


def write(root: Path, rel: str, text: str = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def names(bundle: ProjectBundle) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(bundle.tarball())) as tar:
        return set(tar.getnames())


def unpack(bundle: ProjectBundle, dest: Path) -> None:
    """As the user data does: the archive, then :func:`unpack_command` run by a shell."""
    archive = dest.parent / "project.tar.gz"
    archive.write_bytes(bundle.tarball())
    subprocess.run(["bash", "-c", unpack_command(str(archive), str(dest))], check=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git work tree with tracked, untracked, ignored, credential and virtual-environment files."""
    root = tmp_path / "proj"
    write(root, ".gitignore", "data/\n*.ckpt\n")
    write(root, "src/train.py", "import helpers.util\n")
    write(root, "helpers/__init__.py", "")
    write(root, "helpers/util.py", "VALUE = 1\n")
    write(root, "configs/run.yaml", "lr: 0.1\n")  # untracked, not ignored: shipped
    write(root, "data/train.bin", "0" * 1000)  # ignored
    write(root, "model.ckpt", "weights")  # ignored
    write(root, ".env", "AWS_SECRET_ACCESS_KEY=secret\n")  # not ignored, but credentials
    write(root, ".env.example", "AWS_SECRET_ACCESS_KEY=\n")
    write(root, ".aws/credentials", "[default]\n")
    write(root, "keys/deploy.pem", "-----BEGIN PRIVATE KEY-----\n")
    write(root, "venv/pyvenv.cfg", "home = /usr\n")  # a virtual environment nobody ignored
    write(root, "venv/lib/site.py", "")
    write(root, "helpers/__pycache__/util.cpython-311.pyc", "")
    git(root, "init", "-q")
    git(root, "add", ".gitignore", "src/train.py", "helpers/__init__.py", "helpers/util.py")
    return root


def test_git_work_tree_ships_what_git_counts_minus_credentials(repo: Path) -> None:
    write(repo, "vendor/lib/code.py", "")
    git(repo / "vendor" / "lib", "init", "-q")  # a nested repository: git lists it as a directory
    bundle = collect(repo / "src" / "train.py", cwd=repo)
    assert bundle.git and bundle.root == repo.resolve() and bundle.script == "src/train.py"
    assert names(bundle) == {".gitignore", "src/train.py", "helpers/__init__.py", "helpers/util.py",
                             "configs/run.yaml", ".env.example"}
    notes = "\n".join(bundle.notes())
    assert "(credentials) (srifty never ships credentials): " in notes
    for left_out in (".env", ".aws/credentials", "keys/deploy.pem", "venv/"):
        assert left_out in notes
    assert "(git submodule or nested repository): vendor/lib/" in notes
    assert "data/train.bin" not in notes and "model.ckpt" not in notes  # ignored by git: not news


def test_the_script_and_its_requirements_ship_even_when_ignored(repo: Path) -> None:
    write(repo, ".gitignore", "data/\n*.ckpt\nscratch/\n")
    script = write(repo, "scratch/try.py", "import helpers.util\n")
    req = write(repo, "scratch/requirements.txt", "numpy\n")
    bundle = collect(script, cwd=repo, always=(req,))
    assert {"scratch/try.py", "scratch/requirements.txt", "helpers/util.py"} <= names(bundle)


def test_run_location_mirrors_where_srifty_was_started(repo: Path, tmp_path: Path) -> None:
    script = repo / "src" / "train.py"
    assert collect(script, cwd=repo).run_location() == (INSTANCE_ROOT, "src/train.py")
    assert collect(script, cwd=repo / "src").run_location() == (f"{INSTANCE_ROOT}/src", "train.py")
    assert collect(script, cwd=repo / "helpers").run_location("/x") == ("/x/helpers", "../src/train.py")
    assert collect(script, cwd=tmp_path).run_location() == (INSTANCE_ROOT, "src/train.py")  # outside: the root


def test_a_plain_directory_ships_everything_under_it(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    script = write(root, "train.py", "import _common\n")
    write(root, "_common.py", "")
    write(root, "sub/data.csv", "a,b\n")
    write(root, "__pycache__/_common.cpython-311.pyc", "")
    write(root, ".venv/pyvenv.cfg", "")
    write(root, ".venv/lib/big.py", "")
    write(root, ".ssh/id_ed25519", "key")
    bundle = collect(script, cwd=tmp_path)
    assert not bundle.git and bundle.root == root.resolve()
    assert names(bundle) == {"train.py", "_common.py", "sub/data.csv"}
    notes = "\n".join(bundle.notes())
    assert ".venv/" in notes and ".ssh/id_ed25519" in notes


@pytest.mark.parametrize("use_git", [False, True], ids=["directory", "git"])
def test_symlinks_never_lead_out_of_the_project(tmp_path: Path, use_git: bool) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.txt", "TOP-SECRET-OUTSIDE\n")
    write(outside, "pkg/mod.py", "TOP-SECRET-MODULE = 1\n")
    root = tmp_path / "proj"
    script = write(root, "train.py", "import helpers\n")
    write(root, "helpers/util.py", "VALUE = 1\n")
    (root / "secret_link.txt").symlink_to(outside / "secret.txt")
    (root / "pkg").symlink_to(outside / "pkg", target_is_directory=True)
    (root / "via_dotdot.txt").symlink_to("../outside/secret.txt")
    (root / "broken.txt").symlink_to(root / "nowhere.txt")
    (root / "util_link.py").symlink_to(root / "helpers" / "util.py")  # absolute, but inside
    (root / "helpers_link").symlink_to("helpers", target_is_directory=True)
    if use_git:
        git(root, "init", "-q")
    bundle = collect(script, cwd=root)
    assert bundle.git is use_git
    with tarfile.open(fileobj=io.BytesIO(bundle.tarball())) as tar:
        members = {m.name: m for m in tar.getmembers()}
        raw = b"".join(tar.extractfile(m).read() for m in members.values() if m.isfile())
    assert set(members) == {"train.py", "helpers/util.py", "util_link.py", "helpers_link"}
    assert members["util_link.py"].issym() and members["util_link.py"].linkname == "helpers/util.py"
    assert members["helpers_link"].linkname == "helpers"
    assert b"TOP-SECRET" not in raw
    notes = "\n".join(bundle.notes())
    assert "(symlink leading out of the project): " in notes and "(broken symlink): broken.txt" in notes
    for link in ("secret_link.txt", "pkg", "via_dotdot.txt"):
        assert link in notes
    dest = tmp_path / "unpacked"
    unpack(bundle, dest)
    assert (dest / "util_link.py").read_text() == "VALUE = 1\n"
    assert (dest / "helpers_link" / "util.py").is_file()


def test_size_limit_names_the_biggest_files(repo: Path) -> None:
    write(repo, "configs/huge.npy", "0" * (2 * MB))
    write(repo, "configs/big.npy", "0" * (MB // 2))
    with pytest.raises(SriftyError) as info:
        collect(repo / "src" / "train.py", cwd=repo, max_bytes=MB)
    err = info.value
    assert "is 2.5 MB" in err.message and "above the limit of 1 MB" in err.message
    assert "Biggest files: configs/huge.npy (2.0 MB), configs/big.npy (0.5 MB)" in err.message
    assert "configs/ (2.5 MB)" in err.message
    assert "add them to .gitignore" in (err.hint or "") and "max_bundle_mb" in (err.hint or "")


def test_user_data_unpacks_and_runs_as_the_bundle_says(tmp_path: Path) -> None:
    """The shared pieces the e2e test relies on are the ones the user data uses."""
    script = EXAMPLES / "cnn_resnet.py"
    bundle = collect(script, cwd=ROOT / "examples")
    request = ProfileRequest(script=str(script), instance_types=["g5.xlarge"], instance_profile="p")
    setup = RunSetup("r1", S3Location("b", "p"), "ami-1", ["us-east-1a"], bundle)
    user_data = Ec2Backend(catalog=Catalog.snapshot()).type_plan(request, "g5.xlarge", setup, 1, False).user_data
    cwd, arg = bundle.run_location()
    assert (cwd, arg) == (f"{INSTANCE_ROOT}/examples", "cnn_resnet.py")
    assert f"aws s3 cp s3://b/p/runs/r1/project.tar.gz project.tar.gz && {unpack_command('project.tar.gz')}" in user_data
    assert f"(mkdir -p {cwd} && cd {cwd} && /opt/srifty/venv/bin/srifty profile {arg} " in user_data


def test_requirements_inside_the_project_install_in_place(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    script = write(root, "src/train.py", "")
    write(root, "requirements.txt", "-r extra.txt\n")  # at the work tree's root: found, and installed from there
    git(root, "init", "-q")
    bundle = collect(script, cwd=root)
    request = ProfileRequest(script=str(script), instance_types=["g5.xlarge"], instance_profile="p")
    setup = RunSetup("r1", S3Location("b", "p"), "ami-1", ["us-east-1a"], bundle)
    plan = Ec2Backend(catalog=Catalog.snapshot()).type_plan(request, "g5.xlarge", setup, 1, False)
    assert plan.keys["requirements"] == ""  # nothing uploaded on its own
    assert f"(cd {INSTANCE_ROOT} && /opt/srifty/venv/bin/pip install -q -r requirements.txt) || fail requirements" \
        in plan.user_data
    elsewhere = write(tmp_path, "other/reqs.txt", "numpy\n")  # --requirements outside the project: uploaded
    request.requirements = str(elsewhere)
    plan = Ec2Backend(catalog=Catalog.snapshot()).type_plan(request, "g5.xlarge", setup, 1, False)
    assert plan.keys["requirements"] == "p/runs/r1/requirements.txt"
    assert "requirements.txt && /opt/srifty/venv/bin/pip install -q -r requirements.txt" in plan.user_data


@pytest.mark.slow
def test_what_the_instance_unpacks_runs(tmp_path: Path) -> None:
    """examples/cnn_resnet.py imports _common from its directory: shipped alone (as srifty once
    did) it cannot start. Bundled, unpacked where nothing else is, it profiles completely."""
    bundle = collect(EXAMPLES / "cnn_resnet.py", cwd=ROOT)
    assert bundle.contains("examples/_common.py")
    dest = tmp_path / "opt-srifty-project"
    unpack(bundle, dest)
    cwd, script = bundle.run_location(str(dest))
    assert Path(cwd, script).resolve() == (dest / "examples" / "cnn_resnet.py").resolve()
    out = tmp_path / "cnn.json"
    env_out = run_srifty("profile", script, "--nproc", "1", "--max-seconds", "3", "--min-iterations", "5",
                         "--out", str(out), "--json", cwd=Path(cwd))
    assert env_out.returncode == 0, env_out.stderr
    assert json.loads(env_out.stdout)["status"] == "complete"
    doc = json.loads(out.read_text())
    assert doc["status"] == "complete" and doc["measurement"]["iterations_used"] >= 1
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):  # _common was imported from the unpacked copy
        assert list((dest / "examples" / "__pycache__").glob("_common.*.pyc"))


def test_a_module_ships_the_project_it_runs_from(tmp_path: Path) -> None:
    """Run as a module (`srifty profile -m mypkg.train`), the project is where it runs from, not the
    module's own directory: outside a git work tree that directory itself, run from its top, where
    `python -m mypkg.train` finds the package; a module outside it is refused."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("from . import helpers\n")
    (tmp_path / "mypkg" / "helpers.py").write_text("")
    bundle = collect(tmp_path / "mypkg" / "train.py", cwd=tmp_path, module=True)
    assert bundle.root == tmp_path.resolve() and bundle.workdir == "."
    assert {"mypkg/__init__.py", "mypkg/train.py", "mypkg/helpers.py"} <= {e.rel for e in bundle.entries}
    assert bundle.run_location() == ("/opt/srifty/project", "mypkg/train.py")
    # and the instance's srifty runs it as a module there, its arguments after --
    from srifty.profiling.ec2.userdata import profile_command

    req = ProfileRequest(script=str(tmp_path / "mypkg" / "train.py"), module="mypkg.train", script_args=["--width", "8"])
    cmd = profile_command(req, "g5.xlarge", bundle, 1)
    assert "cd /opt/srifty/project && /opt/srifty/venv/bin/srifty profile --module mypkg.train --backend ec2" in cmd
    assert cmd.endswith(" -- --width 8)")
    # a script's own batch option goes with the batch, as one word the instance's click reads back
    req.batch_size, req.batch_arg = 16, "--per_device_train_batch_size"
    cmd = profile_command(req, "g5.xlarge", bundle, 1)
    assert " --batch-size 16 --batch-arg=--per_device_train_batch_size " in cmd
    from click.testing import CliRunner

    from srifty.cli import cli

    ran = CliRunner().invoke(cli, ["profile", str(tmp_path / "mypkg" / "train.py"), "--batch-size", "16",
                                   "--batch-arg=--per_device_train_batch_size", "--dry-run"])
    assert ran.exit_code == 0 and "SRIFTY_BATCH_ARG=--per_device_train_batch_size" in ran.output, ran.output
    # as a script, the project is the script's directory
    assert collect(tmp_path / "mypkg" / "train.py", cwd=tmp_path).root == (tmp_path / "mypkg").resolve()
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other"
    elsewhere.mkdir()
    with pytest.raises(SriftyError, match="lies outside the project"):
        collect(tmp_path / "mypkg" / "train.py", cwd=elsewhere, module=True)
