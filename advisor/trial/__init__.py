"""The trial: a short real training run (``run``, ``model``), as a background job (``jobs``) or on GPUs (``launch``)."""
