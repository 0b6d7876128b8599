"""The model adapters: one per model API (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages), the streamed HTTP exchange and server-sent events they share, the choice of API
(``MODEL_API``) and the retry policy. Each speaks :class:`agent_core.ports.ChatModel`.
"""
