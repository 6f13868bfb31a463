"""Hypothesis strategies shared by the property-based tests."""

from hypothesis import strategies as st

# Any JSON value, small: what a broken MLLOG record may carry in any field.
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
