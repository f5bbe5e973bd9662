"""The real-lakeFS tier (tests run on real lakeFS only): the integration tests' seeded repository."""

from tests.integration.conftest import seeded

__all__ = ["seeded"]
