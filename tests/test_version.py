"""One version: pyproject.toml declares it dynamic and setuptools reads ``draftgen.__version__``."""

from __future__ import annotations

import shutil
import tomllib
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import read_configuration

import draftgen

ROOT = Path(__file__).resolve().parent.parent


def built_version(root: Path) -> str:
    """The version setuptools gives the distribution built from ``root``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # [tool.setuptools] is "beta" in setuptools' words
        return read_configuration(root / "pyproject.toml", expand=True)["project"]["version"]


def test_pyproject_says_no_version_of_its_own():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and project["dynamic"] == ["version"]


def test_the_distribution_takes_the_packages_version(tmp_path):
    assert built_version(ROOT) == draftgen.__version__
    # Another version written in the package is the one built: nothing else holds a copy.
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "src" / "draftgen"
    package.mkdir(parents=True)
    source = (ROOT / "src" / "draftgen" / "__init__.py").read_text(encoding="utf-8")
    bumped = source.replace(f'__version__ = "{draftgen.__version__}"', '__version__ = "9.8.7"')
    assert bumped != source
    (package / "__init__.py").write_text(bumped, encoding="utf-8")
    assert built_version(tmp_path) == "9.8.7"
