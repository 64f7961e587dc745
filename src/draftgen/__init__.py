"""draftgen: exact-token training data for speculative-decoding drafters."""
