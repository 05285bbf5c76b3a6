"""Reading sequence lengths from the files people have, through one layer of limits (``guard``)."""
