"""Engines run a plan's shards: the local one with worker processes, the Beam one on a runner."""
