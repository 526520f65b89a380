"""The files a call passes through: a static walk that follows one argument into every callee.

    python -m bench.call_walk include/barrierflow/cli/state.py:_cmd_upgrade:args [--root include] [--list]

Starting at a function and one of its parameters, the walk marks that parameter and every local
name assigned from an expression that reads a marked name, then follows every call that is given
a marked name (as an argument, or as the object a method is called on) into the callee, with the
callee's parameters bound to the marked arguments, and so on. Callees are resolved through the
module's imports (also those inside functions and under ``TYPE_CHECKING``, re-exports followed),
``self.method``, and ``name.method`` when the name's class is known from a parameter annotation or
from what it was assigned (a class call, or a function's return annotation). A class called is
walked into its ``__init__``. Only the package's own files count; calls it cannot resolve (an
attribute of an attribute, a callable held in a variable) are not followed, so the count is a
floor for what a reader follows by hand. It prints the number of files and functions visited
(``--list``: the files, with the functions visited in each).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FuncKey = tuple[str, str]  # (module, "f" or "Class.method")


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name -> (module, attr)


def _imports(nodes: Iterator[ast.AST], module: str, is_package: bool) -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, None)
                else:
                    found[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                found[alias.asname or alias.name] = (base, alias.name)
    return found


def _module_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The module's statements outside functions and classes (``if TYPE_CHECKING:`` included)."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


class Index:
    """Every module under ``root`` (``include/``), parsed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = Module(name, path, tree)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    module.functions[node.name] = node
                elif isinstance(node, ast.ClassDef):
                    module.classes[node.name] = node
            module.imports = _imports(_module_level(tree), name, is_package)
            self.modules[name] = module

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, str, str] | None:
        """``name`` of ``module`` as ("function" | "class" | "module", module, name), re-exports followed."""
        if depth > 20:
            return None
        if module not in self.modules:
            return None
        mod = self.modules[module]
        if name in mod.functions:
            return ("function", module, name)
        if name in mod.classes:
            return ("class", module, name)
        if f"{module}.{name}" in self.modules:
            return ("module", f"{module}.{name}", "")
        if name in mod.imports:
            target, attr = mod.imports[name]
            return self.resolve(target, attr, depth + 1) if attr else (
                ("module", target, "") if target in self.modules else None)
        return None

    def method(self, module: str, cls: str, name: str, depth: int = 0) -> FuncKey | None:
        """Method ``name`` of class ``cls`` (or of a base class in the package)."""
        if depth > 10 or module not in self.modules or cls not in self.modules[module].classes:
            return None
        node = self.modules[module].classes[cls]
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                return (module, f"{cls}.{name}")
        for base in node.bases:
            if isinstance(base, ast.Name):
                found = self.resolve(module, base.id)
                if found and found[0] == "class":
                    hit = self.method(found[1], found[2], name, depth + 1)
                    if hit:
                        return hit
        return None

    def function(self, key: FuncKey) -> ast.FunctionDef | ast.AsyncFunctionDef:
        module, qual = key
        if "." in qual:
            cls, name = qual.split(".")
            return next(i for i in self.modules[module].classes[cls].body
                        if isinstance(i, ast.FunctionDef | ast.AsyncFunctionDef) and i.name == name)
        return self.modules[module].functions[qual]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args]


class Walk:
    def __init__(self, index: Index) -> None:
        self.index = index
        self.seen: dict[FuncKey, set[str]] = defaultdict(set)

    def _class_of(self, module: str, scope: dict[str, tuple[str, str | None]], ann: ast.AST | None
                  ) -> tuple[str, str] | None:
        if ann is None:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(ann, ast.BinOp):  # X | None
            return self._class_of(module, scope, ann.left) or self._class_of(module, scope, ann.right)
        if isinstance(ann, ast.Name):
            found = self._lookup(module, scope, ann.id)
            return (found[1], found[2]) if found and found[0] == "class" else None
        return None

    def _lookup(self, module: str, scope: dict[str, tuple[str, str | None]], name: str) -> tuple[str, str, str] | None:
        if name in scope:
            target, attr = scope[name]
            if attr is None:
                return ("module", target, "") if target in self.index.modules else None
            return self.index.resolve(target, attr)
        return self.index.resolve(module, name)

    def run(self, start: FuncKey, param: str) -> None:
        queue: list[tuple[FuncKey, frozenset[str]]] = [(start, frozenset({param}))]
        while queue:
            key, marked = queue.pop()
            new = set(marked) - self.seen[key]
            if key in self.seen and not new:
                continue
            self.seen[key] |= set(marked)
            queue.extend(self._visit(key, frozenset(self.seen[key])))

    def _visit(self, key: FuncKey, marked: frozenset[str]) -> list[tuple[FuncKey, frozenset[str]]]:
        module, qual = key
        fn = self.index.function(key)
        mod = self.index.modules[module]
        scope = _imports(ast.walk(fn), module, mod.path.name == "__init__.py")
        cls = qual.split(".")[0] if "." in qual else None
        tainted = set(marked)
        types: dict[str, tuple[str, str]] = {}
        if cls:
            types["self"] = (module, cls)
        for arg in [*_params(fn), *fn.args.kwonlyargs]:
            found = self._class_of(module, scope, arg.annotation)
            if found:
                types[arg.arg] = found
        for _ in range(3):  # marks flow through assignments (to a fixpoint, in practice)
            for node in ast.walk(fn):
                value, targets = None, None
                if isinstance(node, ast.Assign):
                    value, targets = node.value, node.targets
                elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
                    value, targets = node.value, [node.target]
                elif isinstance(node, ast.For | ast.comprehension):
                    value, targets = node.iter, [node.target]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    value, targets = node.context_expr, [node.optional_vars]
                if value is None or targets is None:
                    continue
                if _names(value) & tainted:
                    for t in targets:
                        tainted |= _targets(t)
                if isinstance(value, ast.Call) and len(targets) == 1 and isinstance(targets[0], ast.Name):
                    kind = self._callee(module, scope, types, value.func)
                    if kind and kind[0] == "class":
                        types[targets[0].id] = (kind[1], kind[2])
                    elif kind and kind[0] == "function":
                        ret = self.index.function((kind[1], kind[2])).returns
                        found = self._class_of(kind[1], _imports(ast.walk(self.index.modules[kind[1]].tree),
                                                                 kind[1], False), ret)
                        if found:
                            types[targets[0].id] = found
        follow: list[tuple[FuncKey, frozenset[str]]] = []
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            on_marked = receiver is not None and bool(_names(receiver) & tainted) and not (
                isinstance(receiver, ast.Name) and receiver.id in scope | mod.imports and receiver.id not in tainted)
            args = [bool(_names(a) & tainted) for a in node.args]
            kwargs = {k.arg: bool(_names(k.value) & tainted) for k in node.keywords}
            if not (on_marked or any(args) or any(kwargs.values())):
                continue
            target = self._callee(module, scope, types, node.func)
            if target is None:
                continue
            kind, tmod, tname = target
            if kind == "class":
                init = self.index.method(tmod, tname, "__init__")
                if init is None:  # a dataclass: its constructor is generated; the class's file is visited
                    self.seen.setdefault((tmod, tname), set())
                    continue
                callee, bound = init, True
            elif kind == "method":
                callee, bound = (tmod, tname), True
            elif kind == "function":
                callee, bound = (tmod, tname), False
            else:
                continue
            try:
                cfn = self.index.function(callee)
            except (KeyError, StopIteration):
                self.seen.setdefault(callee, set())
                continue
            params = [p.arg for p in _params(cfn)]
            names = {p.arg for p in [*_params(cfn), *cfn.args.kwonlyargs]}
            if bound and params:
                params = params[1:]
            got: set[str] = set()
            if bound and on_marked and _params(cfn):
                got.add(_params(cfn)[0].arg)
            for i, hit in enumerate(args):
                if not hit:
                    continue
                if isinstance(node.args[i], ast.Starred):
                    got |= set(params[i:])
                elif i < len(params):
                    got.add(params[i])
                elif cfn.args.vararg:
                    got.add(cfn.args.vararg.arg)
            for name, hit in kwargs.items():
                if not hit:
                    continue
                if name is None:
                    got |= names
                elif name in names:
                    got.add(name)
                elif cfn.args.kwarg:
                    got.add(cfn.args.kwarg.arg)
            follow.append((callee, frozenset(got)))
        return follow

    def _callee(self, module: str, scope: dict[str, tuple[str, str | None]], types: dict[str, tuple[str, str]],
                func: ast.AST) -> tuple[str, str, str] | None:
        if isinstance(func, ast.Name):
            return self._lookup(module, scope, func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = func.value.id
            if base in types:
                hit = self.index.method(*types[base], func.attr)
                return ("method", *hit) if hit else None
            found = self._lookup(module, scope, base)
            if found and found[0] == "module":
                return self.index.resolve(found[1], func.attr)
            if found and found[0] == "class":  # Class.method(...) or a classmethod
                hit = self.index.method(found[1], found[2], func.attr)
                return ("method", *hit) if hit else None
        return None


def walk(root: Path, start: str) -> dict[str, set[str]]:
    """File -> the functions visited in it, of a walk from ``start`` (``path.py:function:param``,
    ``function`` may be ``Class.method``)."""
    path, function, param = start.rsplit(":", 2)
    index = Index(root)
    parts = list(Path(path).resolve().relative_to(root.resolve()).with_suffix("").parts)
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    w = Walk(index)
    w.run((module, function), param)
    files: dict[str, set[str]] = defaultdict(set)
    for mod, qual in w.seen:
        files[str(index.modules[mod].path.relative_to(root))].add(qual)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.call_walk", description=__doc__.splitlines()[0])
    parser.add_argument("start", help="path.py:function:param, e.g. include/barrierflow/cli/state.py:_cmd_upgrade:args")
    parser.add_argument("--root", default="include", help="the folder the package is in (default include)")
    parser.add_argument("--list", action="store_true", help="list the files and the functions visited in each")
    args = parser.parse_args(argv)
    files = walk(Path(args.root), args.start)
    print(f"{args.start}: {len(files)} files, {sum(len(f) for f in files.values())} functions")
    if args.list:
        for name in sorted(files):
            print(f"  {name}: {', '.join(sorted(files[name]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
