"""The Streamlit kernel explorer (support matrix, slices, curves, live fill)."""
