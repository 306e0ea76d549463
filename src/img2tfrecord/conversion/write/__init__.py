"""Writing: the shards (engines), the resume journal, the run's catalog and the publish switch."""
