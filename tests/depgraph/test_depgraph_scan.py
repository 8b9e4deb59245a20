"""The .gitignore rules the scan and the updates follow."""

from __future__ import annotations

from projections.depgraph.scan import IgnoreRules


def test_gitignore_semantics() -> None:
    rules = IgnoreRules(
        {
            ".gitignore": b"# comment\n*.log\n/top.py\nbuild/\ndocs/**/gen\n!important.log\n",
            "sub/.gitignore": b"local.py\n!top.py\n",
        }
    )
    assert rules.ignored("a.log") and rules.ignored("deep/dir/a.log")
    assert not rules.ignored("important.log")
    assert rules.ignored("top.py") and not rules.ignored("x/top.py")  # anchored
    assert rules.ignored("build/x.py") and rules.ignored("a/build/x.py")  # a directory anywhere
    assert not rules.ignored("build")  # ``build/`` only matches directories
    assert rules.ignored("docs/gen/x.py") and rules.ignored("docs/a/b/gen/x.py")
    assert rules.ignored("sub/local.py") and not rules.ignored("local.py")  # nested file's scope
    # a file in an excluded directory cannot be re-included
    assert rules.ignored("build/important.log")
    assert not IgnoreRules({}).ignored("anything.py")
