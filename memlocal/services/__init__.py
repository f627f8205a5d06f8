"""What the bank offers on top of storage: the prompt block, automation notes, redaction, audit, the LLM processor."""
