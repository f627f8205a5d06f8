"""Framework integrations: memlocal behind the interfaces agent frameworks already use.

One module each, imported by name (nothing here imports a framework):

- :mod:`memlocal.integrations.claude`: a backend for Claude's memory tool (the anthropic SDK's
  ``BetaAbstractMemoryTool``), one profile as the ``/memories`` directory;
- :mod:`memlocal.integrations.langgraph`: a LangGraph ``BaseStore`` (``memlocal[langgraph]``),
  namespaces as profiles.

See docs/integrations.md.
"""
