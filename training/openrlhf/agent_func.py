"""The file OpenRLHF loads with ``--train.agent_func_path``: it must define ``AgentExecutor``."""

from training.openrlhf.executor import make_executor_class

AgentExecutor = make_executor_class()
