"""Chat models for `add(..., infer=True)`: one protocol, an Ollama and an OpenAI adapter."""
