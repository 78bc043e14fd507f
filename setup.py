"""Package discovery for the wheel (the metadata lives in pyproject.toml).

The repository root is the package ``fleetgym``; every folder below it that holds an
``__init__.py`` is a subpackage, except the test, benchmark, example, docs and studies folders,
which stay out of the wheel, as does this file.
"""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

NOT_SHIPPED = (
    *("tests", "tests.*", "benchmarks", "benchmarks.*", "examples", "examples.*", "docs"),
    *("studies", "studies.*"),
)


class BuildPy(build_py):
    """``build_py`` that leaves this build script out of the package."""

    def find_package_modules(self, package, package_dir):  # type: ignore[no-untyped-def]
        modules = super().find_package_modules(package, package_dir)
        if package == "fleetgym":
            modules = [entry for entry in modules if entry[1] != "setup"]
        return modules


setup(
    packages=[
        "fleetgym",
        *(f"fleetgym.{name}" for name in find_packages(".", exclude=NOT_SHIPPED)),
    ],
    cmdclass={"build_py": BuildPy},
)
