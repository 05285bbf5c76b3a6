"""The engine of the sequence packing advisor (pure Python; its folders are its layers, see docs/architecture.md)."""
