"""The worker's shape, checked on the source (STYLE.md, "One owner per protocol").

* Only the checkpoint begins, commits or aborts a transaction (or sends offsets into one): a
  second module doing it would be a second owner deciding abort-and-rewind, retry or replace.
* No collaborator calls back into the loop: ``Worker`` passes none of its own methods to
  another object, except the consumer's rebalance callbacks (Kafka's protocol, not ours).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("streams", "engine", "storage", "schemas")
TXN_CALLS = {"begin_transaction", "commit_transaction", "abort_transaction", "send_offsets_to_transaction"}
OWNER = Path("streams/worker/checkpoint.py")


def _txn_callers(root: Path) -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")):
            calls = {n.func.attr for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in TXN_CALLS}
            if calls:
                found[path.relative_to(root)] = calls
    return found


def test_only_the_checkpoint_begins_commits_or_aborts_a_transaction() -> None:
    found = _txn_callers(ROOT)
    assert found == {OWNER: TXN_CALLS}, f"transactional calls outside {OWNER}: {found}"


def test_the_ownership_check_would_catch_an_offender(tmp_path: Path) -> None:
    (tmp_path / "streams" / "worker").mkdir(parents=True)
    (tmp_path / "streams" / "worker" / "recovery.py").write_text("def f(p):\n    p.abort_transaction(5)\n")
    assert _txn_callers(tmp_path) == {Path("streams/worker/recovery.py"): {"abort_transaction"}}


def _callbacks_into(cls: str, path: Path, allowed: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    methods = {n.name for n in klass.body if isinstance(n, ast.FunctionDef)
               and not any(ast.unparse(d) == "property" for d in n.decorator_list)}
    bad = []
    for call in (n for n in ast.walk(klass) if isinstance(n, ast.Call)):
        target = ast.unparse(call.func)
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            called = {id(n.func) for n in ast.walk(arg) if isinstance(n, ast.Call)}
            for node in ast.walk(arg):  # a bound method handed over, or a lambda that calls one later
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                        and node.attr in methods and target not in allowed
                        and (id(node) not in called or isinstance(arg, ast.Lambda))):
                    bad.append(f"{target}(... self.{node.attr} ...)")
    return bad


def test_no_collaborator_is_handed_a_method_of_the_worker() -> None:
    bad = _callbacks_into("Worker", ROOT / "streams/worker/loop.py", allowed={"self.consumer.subscribe"})
    assert bad == [], f"callbacks into Worker: {bad}"


def test_the_callback_check_would_catch_an_offender(tmp_path: Path) -> None:
    src = tmp_path / "loop.py"
    src.write_text("class Worker:\n    def a(self):\n        Joiner(done=self.b)\n    def b(self):\n        pass\n")
    assert _callbacks_into("Worker", src, allowed=set()) == ["Joiner(... self.b ...)"]
