"""The embedded tiny Jac model: tokenizer, architecture and brief pre-training (`models.tiny`)."""
