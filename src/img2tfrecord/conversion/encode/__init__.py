"""Encoding: one source file into one serialized tf.train.Example (the per-image hot path)."""
