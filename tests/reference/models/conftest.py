import pytest
import torch


@pytest.fixture
def two_threads():
    """Torch's threads at two (the suite runs on one: OMP_NUM_THREADS=1), which the compiled kernels
    (the sort, the gather, the dot interaction) take as theirs; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
