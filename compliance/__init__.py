"""Compliance: JSON Schemas and rule sets (data), and the checkers over submitted logs."""
