"""boards/ and templates/ stay at the top of the repository; a built wheel carries them inside the package
(edgepack/boards, edgepack/templates), where edgepack/resources.py looks first."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        for name in ("boards", "templates"):
            shutil.copytree(ROOT / name, Path(self.build_lib) / "edgepack" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithData})
