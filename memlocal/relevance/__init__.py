"""Relevance: the tokenizer, normalisation, clusters, vocabulary, features and the score (pure)."""
