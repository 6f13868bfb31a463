"""Only the optional compiled row reader; everything else is in pyproject.toml.

``harness/reference/tiered/_rowio.c`` (io_uring row reads at a queue depth, loaded with ctypes by
``harness/reference/tiered/rowio.py``) is built here when a C compiler and the kernel's headers are
present; ``optional=True``: where it cannot be built the install goes on, and the SSD tier reads
with Python threads and says so.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("harness.reference.tiered._rowio", ["harness/reference/tiered/_rowio.c"], optional=True,
                             extra_compile_args=["-O2", "-std=gnu11"])])
