"""`import verl` finds enginery through its `verl.plugins` entry point, in a fresh process as a user's; a broken
install says so at import (verl itself logs a failing plugin at DEBUG only) and `python -m enginery.verl doctor`
says why, one line per check."""
import os
import subprocess
import sys

QUIET = ["-W", "ignore::UserWarning"]  # verl warns at import for each optional engine it lacks (torchtitan, ...)


def run(code, **env):
    return subprocess.run([sys.executable, *QUIET, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_import_verl_registers_enginerys_backends():
    out = run("import verl\n"
              "from verl.workers.engine.base import EngineRegistry\n"
              "for model_type in ('language_model', 'value_model'):\n"
              "    known = EngineRegistry._engines[model_type]\n"
              "    print(model_type, sorted(b for b in known if b.startswith('enginery_')), sorted(known['enginery_fsdp2']))\n"
              "print(EngineRegistry.get_engine_cls('language_model', 'enginery_fsdp').__mro__[1].__name__)")
    assert out.returncode == 0, out.stderr
    assert "language_model ['enginery_fsdp', 'enginery_fsdp2', 'enginery_veomni'] ['cpu', 'cuda']" in out.stdout
    assert "value_model ['enginery_fsdp', 'enginery_fsdp2', 'enginery_veomni'] ['cpu', 'cuda']" in out.stdout
    assert "LanguageModelEngine" in out.stdout
    assert "not registered" not in out.stderr


def test_a_broken_install_is_a_warning_at_import_verl():
    # The extension cannot load (as with a torch of another ABI): verl goes on without enginery, loudly.
    out = run("import sys; sys.modules['enginery._enginery'] = None\n"
              "import verl\n"
              "from verl.workers.engine.base import EngineRegistry\n"
              "print('registered:', 'enginery_fsdp' in EngineRegistry._engines.get('language_model', {}))")
    assert out.returncode == 0, out.stderr
    assert "registered: False" in out.stdout
    assert "RuntimeWarning: enginery: its engines were not registered with verl" in out.stderr
    assert "enginery._enginery" in out.stderr


def doctor(*prelude, **env):
    code = "".join(p + "\n" for p in prelude) + "import sys, runpy; sys.argv = ['enginery.verl', 'doctor']\n" \
           "runpy.run_module('enginery.verl', run_name='__main__')"
    return run(code, **env)


def test_doctor_passes_on_a_good_install():
    out = doctor()
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["OK    enginery", "OK    plugins", "OK    engine", "OK    verl",
                                                       "OK    entry point", "OK    registration", "OK    registry"]


def test_doctor_builds_an_engine_and_names_what_refuses_it():
    # ENGINERY_CUDA_KERNELS is read when an engine is built, not when plugins load: every engine verl would make
    # is refused, so the doctor builds one of each backend rather than report OK
    out = doctor(ENGINERY_CUDA_KERNELS="swiglu,nope")
    assert out.returncode == 1, out.stdout
    fail = out.stdout.strip().splitlines()[-1]
    assert fail.startswith("FAIL  engine: building the enginery_fsdp engine (language_model on "), fail
    assert 'ENGINERY_CUDA_KERNELS is "swiglu,nope": "nope" is no kernel' in fail


def test_doctor_names_what_keeps_verl_from_loading_the_plugin():
    out = doctor(VERL_USE_EXTERNAL_PLUGINS="none")
    assert out.returncode == 1
    assert "FAIL  entry point: VERL_USE_EXTERNAL_PLUGINS='none' keeps verl from loading the entry point" in out.stdout


def test_doctor_under_another_torch_says_so_in_one_line(tmp_path):
    """enginery itself cannot import, so neither can its doctor: it says why in one line instead."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('__version__ = "2.10.0+cu128"\n')
    out = subprocess.run([sys.executable, "-m", "enginery.verl", "doctor"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ['PYTHONPATH']}"})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == ("enginery: enginery was built against torch " + torch_version() +
                                       ", but this Python imports torch 2.10.0+cu128 (from " + str(tmp_path / "torch") +
                                       "): pip install torch==" + torch_version().split("+")[0] + ", or rebuild "
                                       "enginery against torch 2.10.0+cu128 (pip install --force-reinstall --no-deps "
                                       "<enginery source or wheel built against it>)"), out.stderr


def torch_version():
    import torch
    return torch.__version__
