"""The CLI as a user meets it: help, version, fast start-up, errors, `show`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from srifty import __version__
from srifty.cli import LAZY_COMMANDS, cli, main

from conftest import PROFILES, ROOT, run_srifty


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from srifty.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'sklearn', 'boto3', 'pandas') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY=\n" in res.stdout, res.stdout
    for name in ("profile", "show", *LAZY_COMMANDS):
        assert name in res.stdout


def test_the_library_and_a_profile_s_launch_do_not_import_torch() -> None:
    """Every command's process imports srifty.api, and `srifty profile` launches torchrun from its
    own and writes the profile: none of it pays torch's import (over a second here; the workers
    import it), which a module of the profiling package imported at its top once made every
    command pay. Where the machine has no GPU driver, finding that no GPU is there does not import
    it either; where it has one, torch says how many GPUs its build sees."""
    from srifty.profiling.backend import gpu_driver_present

    code = (
        "import sys\n"
        "import srifty.api\n"
        "from srifty.cli import main\n"
        "from srifty.profiling.backend import local_cuda\n"
        "from srifty.profiling.document import torch_version\n"
        "from srifty.profiling.local import local_gpu_count\n"
        "try:\n    main(['profile', 'tests/scripts/needs_args.py', '--nproc', '2', '--dry-run'])\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY=' + ','.join(m for m in ('torch', 'sklearn') if m in sys.modules))\n"
        "print('GPUS', local_gpu_count('auto'), local_cuda('auto'), torch_version(), 'torch' in sys.modules)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "-m torch.distributed.run" in res.stdout and "HEAVY=\n" in res.stdout, res.stdout
    import torch

    if not gpu_driver_present():
        assert f"GPUS 0 False {torch.__version__} False" in res.stdout, res.stdout


def test_version() -> None:
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and __version__ in res.output


def test_every_command_has_help_with_text() -> None:
    runner = CliRunner()
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        assert cmd is not None and (cmd.help or "").strip(), name
        res = runner.invoke(cli, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                res = runner.invoke(cli, [name, sub, "--help"])
                assert res.exit_code == 0, (name, sub, res.output)


def test_profile_help_shows_examples() -> None:
    res = CliRunner().invoke(cli, ["profile", "--help"])
    assert "Examples:" in res.output and "SRIFTY_BATCH_SIZE" in res.output


def test_show_table_and_json() -> None:
    res = run_srifty("show", str(PROFILES / "local"))
    assert res.returncode == 0, res.stderr
    assert "cnn_resnet" in res.stdout and "Allreduce" in res.stdout
    # what the profiler warned of when it wrote a profile is said again under the table
    mlp = json.loads((PROFILES / "local" / "mlp_recsys.json").read_text())["warnings"]
    assert mlp and all(f"warning: {PROFILES / 'local' / 'mlp_recsys.json'}: {w}" in res.stderr for w in mlp)
    assert "cnn_resnet.json:" not in res.stderr  # it has none
    res = run_srifty("show", str(PROFILES / "local"), "--json")
    doc = json.loads(res.stdout)
    assert doc["schema"] == 1
    models = {p.get("model") for p in doc["profiles"]}
    assert {"cnn_resnet", "transformer_lm", "mlp_recsys"} <= models
    # one model's profiles at several batches (b128.json sorts before b32.json): in batch order
    res = run_srifty("show", str(PROFILES / "h200" / "cnn_resnet"), "--json")
    assert [p["local_batch_size"] for p in json.loads(res.stdout)["profiles"]] == [32, 128, 512]


def test_bad_profile_is_one_paragraph_error(tmp_path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    res = run_srifty("show", str(bad))
    assert res.returncode == 1
    assert res.stderr.startswith("Error: ") and "Traceback" not in res.stderr
    assert "a profile is a JSON object" in res.stderr
    res = run_srifty("--debug", "show", str(bad))
    assert "Traceback" in res.stderr


def test_usage_errors_exit_nonzero(capsys) -> None:
    try:
        main(["profile", "--nproc", "zero"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "Invalid value" in capsys.readouterr().err


def test_collectives_refuses_a_script() -> None:
    res = run_srifty("profile", "--collectives", "examples/cnn_resnet.py")
    assert res.returncode == 1 and "give no SCRIPT" in res.stderr


def test_a_module_s_file_is_found_as_python_m_finds_it_without_running_it(tmp_path: Path) -> None:
    """`srifty profile -m NAME` finds the file `python -m NAME` runs from the current directory,
    the import system's way but without running the packages' code (here it would raise): a
    module's own file, a package's __main__; a name nothing answers to is told plainly."""
    from srifty.errors import SriftyError
    from srifty.profiling.request import module_file

    (tmp_path / "mypkg" / "sub").mkdir(parents=True)
    for init in ("mypkg/__init__.py", "mypkg/sub/__init__.py"):
        (tmp_path / init).write_text("raise RuntimeError('a package is not run to find its modules')\n")
    (tmp_path / "mypkg" / "sub" / "train.py").write_text("")
    (tmp_path / "mypkg" / "__main__.py").write_text("")
    assert module_file("mypkg.sub.train", str(tmp_path)) == str(tmp_path / "mypkg" / "sub" / "train.py")
    assert module_file("mypkg", str(tmp_path)) == str(tmp_path / "mypkg" / "__main__.py")
    for missing in ("mypkg.nothere", "mypkg.sub.train.deeper", "not a name", "mypkg.sub"):
        with pytest.raises(SriftyError, match="No module .* to run from"):
            module_file(missing, str(tmp_path))
