"""`python -m bench.call_walk`: the walk follows a marked argument into callees (through imports,
re-exports, methods of annotated parameters and of what a call returned), and only there."""

from __future__ import annotations

from pathlib import Path

from bench.call_walk import walk

FILES = {
    "pkg/__init__.py": "",
    "pkg/front.py": (
        "from pkg.ops import operate\n"
        "from pkg.unrelated import other\n\n"
        "def handler(args):\n"
        "    other(1)\n"
        "    return operate(args.spec)\n"),
    "pkg/ops/__init__.py": "from pkg.ops.impl import operate\n",
    "pkg/ops/impl.py": (
        "from pkg.model import open_model\n\n"
        "def operate(path):\n"
        "    model = open_model(path)\n"
        "    return model.size()\n"),
    "pkg/model.py": (
        "from __future__ import annotations\n"
        "from pkg.store import Store\n\n"
        "class Model:\n"
        "    def __init__(self, path: str) -> None:\n"
        "        self.store = Store(path)\n\n"
        "    def size(self) -> int:\n"
        "        return len(self.store.path)\n\n"
        "def open_model(path: str) -> Model:\n"
        "    return Model(path)\n"),
    "pkg/store.py": "class Store:\n    def __init__(self, path):\n        self.path = path\n",
    "pkg/unrelated.py": "def other(x):\n    return x\n",
}


def test_the_walk_follows_the_marked_argument_and_nothing_else(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    files = walk(tmp_path, f"{tmp_path / 'pkg/front.py'}:handler:args")
    assert set(files) == {"pkg/front.py", "pkg/ops/impl.py", "pkg/model.py", "pkg/store.py"}
    assert files["pkg/model.py"] == {"open_model", "Model.__init__", "Model.size"}
    assert "pkg/unrelated.py" not in files  # called, but not given the marked argument
