"""``[agents.NAME]``: subagent definitions for the ``task`` tool."""

from __future__ import annotations

from config_helpers import ConfigHome

from coder_es.config import load_config
from coder_es.permissions.subagents import agent_definitions
from coder_es.tools.registry import default_registry

REVIEWER = """
[agents.reviewer]
description = "Reviews a change and lists the problems"
preset = "explore"
max_steps = 7
prompt = "Be brief."
tools = ["read", "grep"]
"""


def test_user_agents_join_the_builtins_and_the_tool_description(home: ConfigHome) -> None:
    home.write_user(REVIEWER)
    agents = agent_definitions(load_config(home.workspace, home.environ).agents)
    assert list(agents) == ["general", "explore", "reviewer"]
    reviewer = agents["reviewer"]
    assert (reviewer.preset, reviewer.max_steps, reviewer.tools) == ("explore", 7, ("read", "grep"))
    task = default_registry(agents).get("task")
    assert task is not None
    definition = task.definition()
    assert "- reviewer: Reviews a change" in definition["description"]
    assert definition["input_schema"]["properties"]["agent"]["enum"][-1] == "reviewer"


def test_an_untrusted_project_cannot_define_agents(home: ConfigHome) -> None:
    home.write_project(REVIEWER)
    config = load_config(home.workspace, home.environ)
    assert "reviewer" not in agent_definitions(config.agents)
    assert any("agents" in line for line in config.ignored_lines())
