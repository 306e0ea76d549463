"""Reading shards without TensorFlow: statistics, checks, extraction, the contact sheet, the report."""
