"""The wheel `make test` builds (pip wheel over this build tree, into <build>/dist) installed as a user gets it:
into a fresh venv holding the same torch, then used from another folder with no environment variable — `import
enginery`, the bundled plugins, the `enginery` command training the demo's model, the verl entry point — and
removed by `pip uninstall` without a trace (docs/ARCHITECTURE.md, "Packaging")."""
import configparser
import glob
import json
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

BUILD = Path(os.environ["ENGINERY_BUILD_DIR"])
SOURCE = Path(os.environ["ENGINERY_SOURCE_DIR"])
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def wheel():
    wheels = glob.glob(str(BUILD / "dist" / "enginery-*.whl"))
    if len(wheels) != 1:
        pytest.fail(f"expected one wheel in {BUILD / 'dist'}, found {wheels}: `make test` builds it (pip wheel "
                    f"--no-build-isolation -Cbuild-dir={BUILD} -w {BUILD / 'dist'} .)")
    module = glob.glob(str(BUILD / "python" / "enginery" / "_enginery*.so"))[0]
    if os.path.getmtime(wheels[0]) < os.path.getmtime(module):
        pytest.fail(f"{wheels[0]} is older than this build tree's {module}: rebuild it as `make test` does")
    return Path(wheels[0])


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A new venv whose site-packages shows this environment's torch (and its CUDA libraries) entry by entry, as a
    second install of the same torch would, with the wheel installed by pip."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    new_site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if not entry.name.lower().startswith(("enginery", "__pycache__")) and not (new_site / entry.name).exists():
            (new_site / entry.name).symlink_to(entry)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return {"root": root, "python": python, "site": new_site, "elsewhere": tmp_path_factory.mktemp("elsewhere")}


def run(venv, *command):
    out = subprocess.run([str(c) for c in command], cwd=venv["elsewhere"], env=CLEAN_ENV, capture_output=True,
                         text=True, timeout=400)
    assert out.returncode == 0, f"{command}: {out.stdout[-3000:]}{out.stderr[-3000:]}"
    return out.stdout


def test_wheel_holds_the_package_command_plugins_and_metadata(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("enginery/__init__.py", "enginery/_build_info.py", "enginery/_cli.py", "enginery/verl/plugin.py",
                     "enginery/verl/engine_config.py", "enginery/verl/conf/engine/enginery.yaml",
                     "enginery/bin/enginery", "enginery/lib/libenginery_host_api.so",
                     "enginery/lib/enginery/plugins/enginery_fsdp/libenginery_fsdp.so",
                     "enginery/lib/enginery/plugins/enginery_fsdp/plugin.toml"):
        assert expected in names, expected
    assert any(n.startswith("enginery/_enginery.") and n.endswith(".so") for n in names)
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    entry_points = configparser.ConfigParser()
    entry_points.read_string(zipfile.ZipFile(wheel).read(info + "/entry_points.txt").decode())
    assert entry_points["console_scripts"]["enginery"] == "enginery._cli:main"
    # The build tree's own dist-info (python/metadata/) must say the same as pyproject.toml.
    build_tree = configparser.ConfigParser()
    build_tree.read(SOURCE / "python" / "metadata" / "entry_points.txt")
    assert dict(entry_points["verl.plugins"]) == dict(build_tree["verl.plugins"]) == {"enginery": "enginery.verl.plugin"}
    metadata = zipfile.ZipFile(wheel).read(info + "/METADATA").decode()
    assert "Version: 0.1.0" in metadata and "Requires-Dist: torch>=2.8" in metadata


def test_every_rpath_is_relative_to_the_install(venv):
    package = venv["site"] / "enginery"
    elves = [p for p in package.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert len(elves) >= 8
    for elf in elves:
        dynamic = subprocess.run(["readelf", "-d", str(elf)], check=True, capture_output=True, text=True).stdout
        paths = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "PATH)" in line]
        assert paths, f"{elf} has no RPATH"
        for entry in paths[0].split(":"):
            assert entry.startswith("$ORIGIN"), f"{elf}: {entry}"
        assert any(e.endswith("/torch/lib") for e in paths[0].split(":")), f"{elf}: {paths[0]}"


def test_import_finds_its_plugins_from_another_folder(venv):
    out = run(venv, venv["python"], "-c", "import enginery, json; loaded = enginery.load_plugins(); "
              "print(json.dumps({'file': enginery.__file__, 'loaded': loaded, "
              "'backends': sorted({e['backend'] for e in enginery.plugins()})}))")
    found = json.loads(out.strip().splitlines()[-1])
    assert found["file"].startswith(str(venv["site"] / "enginery"))
    assert found["loaded"] == ["enginery_fsdp"]
    assert {"fsdp", "fsdp2", "veomni"} <= set(found["backends"])


def test_installed_command_runs_alone_through_its_rpath(venv):
    # The binary itself, not the console script: no LD_LIBRARY_PATH, torch found beside the package.
    out = run(venv, venv["site"] / "enginery" / "bin" / "enginery", "plugins")
    assert str(venv["site"] / "enginery" / "lib" / "enginery" / "plugins") in out
    assert "language_model / fsdp2 / cpu" in out


def test_console_script_trains_the_demo_model(venv):
    out_dir = venv["elsewhere"] / "run"
    run(venv, venv["root"] / "bin" / "enginery", "train", "--config", SOURCE / "examples" / "demo.toml", "--nproc", "2",
        "--set", "trainer.total_training_steps=4", "--set", "trainer.test_freq=-1", "--set", "trainer.save_freq=-1",
        "--set", "trainer.val_before_train=false", "--set", f"trainer.default_local_dir=\"{out_dir}\"")
    steps = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [s for s in steps if "loss" in s]
    assert len(train) == 4 and all(s["loss"] > 0 for s in train)


def test_verl_entry_point_is_installed(venv):
    out = run(venv, venv["python"], "-c", "from importlib.metadata import entry_points; "
              "print([(e.name, e.value) for e in entry_points(group='verl.plugins')])")
    assert "('enginery', 'enginery.verl.plugin')" in out


def test_uninstall_removes_everything(venv):
    before = {p.name for p in venv["site"].iterdir()}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv["python"]), "uninstall", "-y", "enginery"],
                   check=True, capture_output=True)
    left = {p.name for p in venv["site"].iterdir()}
    assert "enginery" in before and not {n for n in left if n.lower().startswith("enginery")}, left
    assert not (venv["root"] / "bin" / "enginery").exists()
