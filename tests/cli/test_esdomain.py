"""The command line imports eventsourcing.domain without tokenizing a signature text
(coder_es.cli.esdomain), and with the same result."""

from __future__ import annotations

import inspect
import subprocess
import sys

from coder_es.cli.esdomain import OBJECT_INIT


def test_the_signature_given_is_the_one_inspect_computes() -> None:
    real = inspect.signature(object.__init__)
    assert real == OBJECT_INIT
    assert str(OBJECT_INIT) == str(real)


def test_a_process_imports_the_domain_without_tokenize_and_puts_inspect_back() -> None:
    code = """
import inspect, sys, tokenize
compiled = []
real_compile = tokenize._compile
tokenize._compile = lambda *a: compiled.append(a) or real_compile(*a)
real_signature = inspect.signature
from coder_es.cli.esdomain import install
install()
from eventsourcing.domain import Aggregate, event
assert inspect.signature is real_signature
assert not any(type(f).__name__ == "_Hook" for f in sys.meta_path)

class Dog(Aggregate):
    @event("Registered")
    def __init__(self, name: str) -> None:
        self.name = name

dog = Dog(name="rex")
assert dog.name == "rex" and len(dog.collect_events()) == 1
print(len(compiled))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
