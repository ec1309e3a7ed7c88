"""The package metadata declares the `verl.plugins` entry point verl imports at start-up (pure Python: no
extension, no plugins). Checked on the source template rendered as CMake renders it, and on the build tree's copy
when the build tree is on sys.path (as ctest runs it)."""
import importlib.metadata as metadata
import os
import re
import sys

import pytest

NEEDS_ENGINE = False
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def entry_points(group):
    found = metadata.entry_points()
    if hasattr(found, "select"):
        return list(found.select(group=group))
    return list(found.get(group, []))  # Python 3.8/3.9 (whose entry points lack .dist: the test needs 3.10+)


def render_dist_info(site, version="9.8.7"):
    """python/metadata/* into <site>/enginery-<version>.dist-info, as python/CMakeLists.txt configures it."""
    dist = site / f"enginery-{version}.dist-info"
    dist.mkdir()
    for name in ("entry_points.txt", "top_level.txt"):
        (dist / name).write_text(open(os.path.join(SOURCE, "metadata", name)).read())
    template = open(os.path.join(SOURCE, "metadata", "METADATA.in")).read()
    (dist / "METADATA").write_text(template.replace("@PROJECT_VERSION@", version))


def test_entry_point_found_once_the_install_dir_is_on_sys_path(tmp_path, monkeypatch):
    render_dist_info(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The build tree's copy may be on sys.path too (ctest): pick the rendered one by its version.
    ours = [ep for ep in entry_points("verl.plugins") if getattr(ep, "dist", None) is not None
            and ep.dist.version == "9.8.7"]
    assert len(ours) == 1, entry_points("verl.plugins")
    # verl calls ep.load(): the value must name a module (importing it registers the engines), not a callable.
    assert ours[0].name == "enginery" and ours[0].value == "enginery.verl.plugin"
    module_file = os.path.join(SOURCE, *ours[0].value.split(".")) + ".py"
    assert os.path.isfile(module_file), module_file


def test_build_tree_metadata_declares_the_entry_point():
    build_python = [p for p in sys.path if os.path.isdir(os.path.join(p, "enginery"))
                    and any(re.fullmatch(r"enginery-.+\.dist-info", n) for n in os.listdir(p))]
    if not build_python:
        if os.environ.get("ENGINERY_PLUGIN_DIR"):
            pytest.fail("ctest runs this with the build tree on PYTHONPATH, which has no enginery-*.dist-info")
        pytest.skip("no built enginery package on sys.path")
    ours = [ep for ep in entry_points("verl.plugins") if ep.value == "enginery.verl.plugin"]
    assert ours, "the build tree's dist-info does not declare enginery.verl.plugin under verl.plugins"
    version = metadata.version("enginery")
    cmake = open(os.path.join(SOURCE, "..", "CMakeLists.txt")).read()
    assert re.search(r"project\(enginery VERSION " + re.escape(version) + r"\b", cmake), version
