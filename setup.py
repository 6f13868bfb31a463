"""Only the optional compiled parts; everything else is in pyproject.toml.

``harness/reference/tiered/_rowio.c`` (io_uring row reads at a queue depth, loaded with ctypes by
``harness/reference/tiered/rowio.py``), ``harness/reference/models/_rowupdate.c`` (Adagrad on a bf16
table's rows in one pass, and the radix sort of a batch's ids, loaded by
``harness/reference/models/rowupdate.py``) and ``harness/reference/models/_dotinteraction.c`` (the dot
interaction of bf16 vectors, loaded by ``harness/reference/models/dotkernel.py``) are built here when a C
compiler (and, for the reader, the kernel's headers; for the models' two, OpenMP) is present;
``optional=True``: where one cannot be built the install goes on, the SSD tier reads with Python threads
and says so, and the bf16 tables' update, the ids' sort and the interaction run in torch's (NumPy's)
operations (the same values, or within a bf16 rounding for the interaction; slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("harness.reference.tiered._rowio", ["harness/reference/tiered/_rowio.c"], optional=True,
              extra_compile_args=["-O2", "-std=gnu11"]),
    # -fno-math-errno: sqrtf inlined and vectorised; the arithmetic's rounding is the file's own (fp-contract off);
    # -fopenmp: threads are torch's own OpenMP threads (the libgomp.so.1 torch has loaded when it loads)
    Extension("harness.reference.models._rowupdate", ["harness/reference/models/_rowupdate.c"], optional=True,
              extra_compile_args=["-O3", "-std=gnu11", "-fno-math-errno", "-fopenmp"], extra_link_args=["-fopenmp"],
              libraries=["m"]),
    # -fopenmp: its samples on torch's own OpenMP threads, as above
    Extension("harness.reference.models._dotinteraction", ["harness/reference/models/_dotinteraction.c"],
              optional=True, extra_compile_args=["-O3", "-std=gnu11", "-fopenmp"], extra_link_args=["-fopenmp"]),
])
