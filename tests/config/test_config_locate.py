"""Line numbers for keys, so problems point into the file."""

from __future__ import annotations

from coder_es.config.locate import key_lines, locate
from coder_es.config.suggest import close_matches, did_you_mean

TEXT = '''\
# a comment
model = "x"
providers.anthropic.base_url = "https://a"

[permissions.rules]
"bash" = { "git *" = "allow" }
'edit' . "secrets/**" = "deny"

[serve]
note = """
[fake]
port = 1
"""
port = 8000

[[extra.list]]
name = "n"
'''


def test_key_lines_cover_headers_dotted_and_quoted_keys() -> None:
    lines = key_lines(TEXT)
    assert lines[("model",)] == 2
    assert lines[("providers", "anthropic", "base_url")] == 3
    assert lines[("providers",)] == 3
    assert lines[("permissions", "rules")] == 5
    assert lines[("permissions", "rules", "bash")] == 6
    assert lines[("permissions", "rules", "edit", "secrets/**")] == 7
    # Lines inside a multi-line string are not keys.
    assert ("fake",) not in lines
    assert lines[("serve", "port")] == 14
    assert lines[("extra", "list", "name")] == 17


def test_locate_falls_back_to_the_closest_enclosing_key() -> None:
    lines = key_lines(TEXT)
    # Keys inside an inline table are placed on the line of the table.
    assert locate(lines, ("permissions", "rules", "bash", "git *")) == 6
    assert locate(lines, ("serve", "missing", 3)) == 9
    assert locate(lines, ("nowhere",)) is None


def test_suggestions_ignore_case_and_list_several() -> None:
    assert close_matches("Permissions", ["permissions", "providers"]) == ["permissions"]
    assert did_you_mean("xyz", ["permissions"]) == ""
    assert did_you_mean("gpt-4", ["gpt-4o", "gpt-4.1"]) == "; did you mean 'gpt-4o' or 'gpt-4.1'?"
