"""What the dashboard pages need, without Streamlit: session state (``state``), figures (``charts``, ``trial_view``)."""
