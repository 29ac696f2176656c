"""The production stream: batches, cohorts, windows, bucket statistics, ingestion, window
readings, retention and bucket rebuilds."""
