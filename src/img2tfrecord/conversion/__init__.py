"""From an image folder to a published dataset: walk, plan, encode, write, finalize, publish."""
