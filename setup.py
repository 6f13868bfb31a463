"""Only the optional compiled parts; everything else is in pyproject.toml.

``harness/reference/tiered/_rowio.c`` (io_uring row reads at a queue depth, loaded with ctypes by
``harness/reference/tiered/rowio.py``) and ``harness/reference/models/_rowupdate.c`` (Adagrad on a bf16
table's rows in one pass, loaded by ``harness/reference/models/rowupdate.py``) are built here when a C
compiler (and, for the reader, the kernel's headers) is present; ``optional=True``: where one cannot be
built the install goes on, the SSD tier reads with Python threads and says so, and the bf16 tables'
update runs in torch's operations (the same values, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("harness.reference.tiered._rowio", ["harness/reference/tiered/_rowio.c"], optional=True,
              extra_compile_args=["-O2", "-std=gnu11"]),
    # -fno-math-errno: sqrtf inlined and vectorised; the arithmetic's rounding is the file's own (fp-contract off)
    Extension("harness.reference.models._rowupdate", ["harness/reference/models/_rowupdate.c"], optional=True,
              extra_compile_args=["-O3", "-std=gnu11", "-fno-math-errno"], libraries=["m"]),
])
