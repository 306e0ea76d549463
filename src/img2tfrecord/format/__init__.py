"""The files' contract, shared by the writing and the reading side: naming, framing, schema, manifest, image rules."""
