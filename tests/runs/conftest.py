"""The run tests use the fake model servers and the installed CLIs of the dispatch tests."""

from tests.dispatch.conftest import (  # noqa: F401  (fixtures, by name)
    anthropic_server,
    copilot_cli,
    fake_anthropic,
    fake_gemini,
    fake_openai,
    gemini_cli,
    gemini_server,
    installed_clis,
    openai_server,
    opencode_cli,
)
