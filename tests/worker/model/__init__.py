"""Tests of worker.model: the model's answer and the guards on it."""
