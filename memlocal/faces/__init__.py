"""The faces over the bank: CLI, REST API and dashboard, MCP server, agent tools and their inputs."""
