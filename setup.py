"""setup.py kept beside pyproject.toml on request; all metadata lives in pyproject.toml."""

from setuptools import setup

setup()
