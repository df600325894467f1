"""Tests of worker.web: the local web page's views."""
