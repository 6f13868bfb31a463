"""The report tests' shared results tree (:mod:`tests.report.report_tree`)."""

from tests.report.report_tree import tree  # noqa: F401 - the fixture
