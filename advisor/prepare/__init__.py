"""``advisor prepare``: the packed data set Megatron-Bridge 0.6.2 trains on, written by the advisor.

``run`` (the whole run: tokenize, pack, fill, write, publish), ``fill`` (Megatron-Bridge's slot filling and
random stream), ``rows`` (packed rows from the token cache), ``parquet`` (Bridge's file, byte for byte),
``shards`` (output files and their parallel writing), ``cache`` (the token cache for re-packing), ``metadata``
(``{S}_metadata.jsonl``). Sits beside ``advice`` and ``trial``: above ``packing`` and ``data``, below the CLI.
"""
