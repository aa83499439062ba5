"""The console's widgets, one per file, each with its own intrinsic styles."""
