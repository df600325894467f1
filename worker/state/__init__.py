"""What the worker keeps in Redis about its work: spend and rests, outcomes, a chunked run's progress."""
