"""Batch jobs: the Files and Batches API and the runner that works through a batch's lines."""
