"""An MLPerf-style benchmark harness built around a reference DLRM."""

__version__ = "0.1.0"
