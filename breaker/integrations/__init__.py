"""The guard in Python agent frameworks, one module per framework, each imported only when used.

`breaker.integrations.langgraph` (LangChain agents and LangGraph graphs), `.openai_agents` (the OpenAI
Agents SDK), `.pydantic_ai`, `.smolagents`, `.crewai`: each needs its framework (the extra of the same
name: `pip install 'cbconsole[langgraph]'`). Importing this package imports no framework.
"""
