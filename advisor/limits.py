"""The sizes the advisor accepts, in one place below every layer (no imports: the command line reads them while it
builds its parser, before anything heavy is loaded).

>>> MAX_PACK < MAX_TOKENS
True
"""

MAX_TOKENS = 1 << 24  # 16M tokens: longer than any context Megatron trains today, small enough to never overflow
MAX_PACK = 1 << 22  # offline packing keeps arrays of pack-size length: 4M-token packs stay well inside 2 GiB
MAX_GPUS = 1 << 17
