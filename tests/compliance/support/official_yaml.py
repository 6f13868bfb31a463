"""The official checker's rule files parsed once per process, not once per log.

``mlp_compliance.configured_checks`` parses each of its YAML rule files with PyYAML's pure-Python
``BaseLoader`` for every log it checks: 87% of its time per log (cProfile, 24 dlrmv4 logs: 2.3 s
of 2.7 s). The drivers check hundreds of logs per process against the same few files, so
:func:`install` gives the checker's module a ``yaml`` whose ``load`` parses a file the first time
and hands out a deep copy of that result after (the checker could change what it is given; a copy
cannot carry a change to the next log). Same loader, same files: the same rules, as
``test_official_driver_gives_the_cli_verdict`` checks against the command line.
"""

from __future__ import annotations

import copy
import os
import types

import yaml

_PARSED: dict[tuple[str, float, type], object] = {}


def _load(stream, Loader):  # noqa: N803 - PyYAML's own keyword
    name = getattr(stream, "name", None)
    if not isinstance(name, str):
        return yaml.load(stream, Loader=Loader)
    key = (os.path.abspath(name), os.stat(name).st_mtime, Loader)
    if key not in _PARSED:
        _PARSED[key] = yaml.load(stream, Loader=Loader)
    return copy.deepcopy(_PARSED[key])


def install(module) -> None:
    """``module.yaml`` (the checker's import of PyYAML) becomes PyYAML with the memoised ``load``."""
    names = {k: getattr(yaml, k) for k in dir(yaml) if not k.startswith("__")}
    module.yaml = types.SimpleNamespace(**{**names, "load": _load})
