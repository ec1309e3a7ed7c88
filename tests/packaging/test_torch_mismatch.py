"""`import enginery` and the `enginery` console script refuse, in one line naming both versions and what to do, a
torch other than the one enginery was built against, and say so when there is no torch at all: never an
undefined-symbol trace from loading the extension (python/enginery/_torch_check.py). The package is the build
tree's (PYTHONPATH=<build>/python); another torch is a folder earlier on sys.path holding a torch package of
another version, as a second installation would be."""
import os
import resource
import subprocess
import sys

import pytest

import enginery
from enginery import _build_info, _torch_check

BUILT = _build_info.TORCH_VERSION


def run_python(code, extra_path=None):
    path = [p for p in (extra_path, os.environ["PYTHONPATH"]) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def other_torch(tmp_path):
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "2.10.0+cu128"\n')
    (package / "version.py").write_text("__version__ = '2.10.0+cu128'\n")
    return tmp_path


def last_line(run):
    lines = run.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def test_built_against_the_torch_running_here():
    import torch
    assert BUILT == torch.__version__
    assert enginery.__version__ == _build_info.VERSION


def test_import_under_another_torch_names_both_versions(other_torch):
    run = run_python("import enginery", str(other_torch))
    assert run.returncode != 0
    line = last_line(run)
    assert line.startswith("ImportError: enginery was built against torch " + BUILT), run.stderr
    assert "imports torch 2.10.0+cu128 (from " + str(other_torch / "torch") + ")" in line
    assert "pip install torch==" + BUILT.split("+")[0] in line
    assert "undefined symbol" not in run.stderr
    assert "_enginery" not in run.stderr  # the extension was never loaded


def test_import_without_torch_says_so():
    run = run_python("import sys; sys.modules['torch'] = None; import enginery")
    assert run.returncode != 0
    line = last_line(run)
    assert line == ("ImportError: enginery was built against torch " + BUILT + ", and this Python (" + sys.executable +
                    ") has no torch: pip install torch==" + BUILT.split("+")[0]), run.stderr


def console_script(folder, before_import="", before_main=""):
    """<folder>/bin/enginery: the wrapper pip writes for the console script, with lines a test adds around it."""
    script = folder / "bin" / "enginery"
    script.parent.mkdir()
    script.write_text("import re\nimport sys\n" + before_import + "from enginery._cli import main\n" + before_main +
                      "if __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    return script


def run_console_script(script, *args, extra_path=None, address_space=None):
    path = [p for p in (extra_path, os.environ["PYTHONPATH"]) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))) if address_space else None
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)


def test_console_script_under_another_torch_exits_with_one_line(other_torch, tmp_path):
    run = run_console_script(console_script(tmp_path), "plugins", extra_path=str(other_torch))
    assert run.returncode == 1
    assert run.stderr.strip() == "enginery: " + _torch_check.mismatch_message(BUILT, "2.10.0+cu128",
                                                                              str(other_torch / "torch"))


def test_console_script_without_torch_exits_with_one_line(tmp_path):
    run = run_console_script(console_script(tmp_path, before_import="sys.modules['torch'] = None\n"), "plugins")
    assert run.returncode == 1
    assert run.stderr.strip() == "enginery: " + _torch_check.missing_torch_message(BUILT)


def test_console_script_checks_torch_without_importing_it(tmp_path):
    """It needs torch's version file only: importing torch (numpy with it) cost over a second per call and failed
    under a 3 GB address-space limit that bin/enginery itself runs in. The build tree's package has no bin/enginery:
    the wrapper stands in for exec and prints what it would get, and which heavy modules the process holds."""
    script = console_script(tmp_path, before_main=(
        "import os\nfrom enginery import _cli\n_cli._BINARY = sys.executable\n"
        "os.execve = lambda path, argv, env: sys.exit(print('exec', argv[1:], [m for m in ('torch', 'numpy', "
        "'enginery._enginery') if m in sys.modules]))\n"))
    run = run_console_script(script, "plugins", "--plugin-dir", "x", address_space=3 * 10**9)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "exec ['plugins', '--plugin-dir', 'x'] []", run.stdout


def test_a_script_of_ones_own_called_enginery_gets_the_whole_package(tmp_path):
    # only the console script's wrapper skips torch and the extension, not any program named `enginery`
    script = tmp_path / "enginery"
    script.write_text("import enginery\nprint(enginery.Engine.__name__, enginery.torch.__version__)\n")
    run = run_console_script(script)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Engine " + BUILT


def test_cli_check_without_torch_exits_with_one_line(monkeypatch):
    monkeypatch.setattr(_torch_check.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        _torch_check.torch_location(BUILT)
    assert str(exit_info.value) == "enginery: " + _torch_check.missing_torch_message(BUILT)


def test_console_script_finds_the_torch_of_this_environment():
    import torch
    folder, version = _torch_check.torch_location(BUILT)
    assert os.path.samefile(folder, os.path.dirname(torch.__file__)) and version == BUILT
