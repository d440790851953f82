"""A system's knobs, the settings more than one language reads (a policy's knobs among them),
declared once as data (`flashml/systems/<name>/settings.toml`).

Each knob has a name, kind (float, int, choice, bool), unit, default, bounds, help, its
command-line flag (none: no option, e.g. the range a tuner clamps to), its function in the
policy ABI and (by its name) its key in the manifest. From that one declaration come:

- the command-line options (`add_options`: the bound, the unit and the default in `--help`,
  a bad value a usage error naming the option);
- the checks of values from elsewhere (`Knobs.check`: a manifest field, a DAG param);
- the simulator's constants, inclusive bounds and checks (`rust_text`) and the C runtime's
  (`c_text`), written by `python -m flashml.features.codegen` with the ABI header and
  checked for freshness by its `--check`.

A knob without a `default` takes it from `default_from` (`path.toml:table.key`, e.g. the
eviction contract's memory window). `legacy` is what a loader takes when a policy .so does not
export the knob's function. Only the standard library and the base layer are imported.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.settings import Number, Option

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = Path(__file__).resolve().parent / "systems"
KINDS = ("float", "int", "choice", "bool")


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str
    help: str
    #: Its command-line flag ("": a knob that is no option, e.g. a size a tuner clamps to).
    flag: str = ""
    #: None: no default (the option is unset unless given; what that means, `help` says).
    default: Any = None
    #: Its function in the policy ABI ("": a knob the .so does not carry).
    abi: str = ""
    unit: str = ""
    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False
    choices: tuple[str, ...] = ()
    legacy: Any = None
    #: The C type its ABI function returns (default: double for a float, else int).
    abi_type: str = ""

    @property
    def c_type(self) -> str:
        return self.abi_type or ("double" if self.kind == "float" else "int")

    @property
    def number(self) -> Number | None:
        """The numeric range (a Number: also the argparse type), None for a choice or a
        switch."""
        if self.kind not in ("float", "int"):
            return None
        return Number(int if self.kind == "int" else float, self.min, self.max,
                      low_open=self.min_open, unit=self.unit, high_open=self.max_open)

    def option(self, help: str | None = None, **over: Any) -> Option:
        """A numeric knob as a row of an option table (`settings.Option`): its name, flag,
        range and default, `help` in place of its own, `over` for the other fields (default,
        metavar, required)."""
        n = self.number
        if n is None or not self.flag:
            raise ValueError(f"knobs.{self.name}: only a numeric knob with a flag is an option")
        fields: dict[str, Any] = {"default": self.default,
                                  "metavar": "N" if self.kind == "int" else "X", **over}
        return Option(self.name, self.flag, n, help=help or self.help, **fields)

    def code(self, value: str) -> int:
        """A choice's code in the ABI: its place in `choices`."""
        return self.choices.index(value)

    def problem(self, value: Any) -> str | None:
        """None if `value` is one of the knob's, else what it must be (`>= 1 candidates per
        eviction`, `one of sign, mean`, `true or false`)."""
        if self.kind == "choice":
            return None if value in self.choices else f"one of {', '.join(self.choices)}"
        if self.kind == "bool":
            return None if isinstance(value, bool) else "true or false"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "an integer" if self.kind == "int" else "a finite number"
        if self.kind == "int" and not (isinstance(value, int)
                                       or (math.isfinite(value) and float(value).is_integer())):
            return "an integer"
        n = self.number
        assert n is not None
        return n.problem(value)

    def check(self, where: str, value: Any) -> Any:
        """`value`, or UserError `<where> must be <what>, got <value>` (`where`: the option,
        or the file and field)."""
        if (why := self.problem(value)) is not None:
            raise UserError(f"{where} must be {why}, got {value!r:.80}")
        return int(value) if self.kind == "int" else value


@dataclass(frozen=True)
class Knobs:
    system: str
    source: Path
    knobs: dict[str, Knob]
    rules: dict[str, dict[str, str]]
    generate: dict[str, str]

    def __getitem__(self, name: str) -> Knob:
        return self.knobs[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.knobs.values())

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self}

    def check_rules(self, where: str, values: dict[str, Any]) -> None:
        """UserError `<where>: <message>` for the first rule between knobs that `values`
        (every knob a rule names) break."""
        for rule in self.rules.values():
            if "when" in rule and not _evaluate(rule["when"], values):
                continue
            if not _evaluate(rule["check"], values):
                shown = ", ".join(f"{n} {values[n]!r}" for n in _names(rule))
                raise UserError(f"{where}: {rule['message']}, got {shown}")


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}


def _evaluate(expr: str, values: dict[str, Any]) -> Any:
    """A rule's expression over the knobs' values: names, numbers, strings, + - * / and one
    comparison (written here rather than eval: a declaration runs no code)."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](ev(node.left), ev(node.comparators[0]))
        raise ValueError(f"rule {expr!r}: {ast.dump(node)[:60]} is not allowed")

    return ev(ast.parse(expr, mode="eval"))


def _names(rule: dict[str, str]) -> list[str]:
    """The knobs a rule reads, in order of first use."""
    out: list[str] = []
    for key in ("when", "check"):
        for node in ast.walk(ast.parse(rule.get(key, "0"), mode="eval")):
            if isinstance(node, ast.Name) and node.id not in out:
                out.append(node.id)
    return out


def _resolve(ref: str) -> Any:
    """`flashml/features/eviction.toml:contract.memory_window` -> that value."""
    path, _, key = ref.partition(":")
    v: Any = tomllib.loads((REPO / path).read_text())
    for part in key.split("."):
        v = v[part]
    return v


@functools.cache
def load(system: str) -> Knobs:
    """The knobs `flashml/systems/<system>/settings.toml` declares (ValueError naming the
    file and the knob when the declaration itself is wrong)."""
    src = SYSTEMS / system / "settings.toml"
    data = tomllib.loads(src.read_text())
    out: dict[str, Knob] = {}
    for name, d in data.get("knobs", {}).items():
        d = dict(d)
        if "default_from" in d:
            d["default"] = _resolve(d.pop("default_from"))
        kind = d.get("kind")
        if kind not in KINDS:
            raise ValueError(f"{src}: knobs.{name}: kind must be one of {KINDS}, got {kind!r}")
        if "choices" in d:
            d["choices"] = tuple(d["choices"])
        k = Knob(name=name, **d)
        for label in ("default", "legacy"):
            v = getattr(k, label)
            if v is not None and k.problem(v) is not None:
                raise ValueError(f"{src}: knobs.{name}.{label} {v!r} must be {k.problem(v)}")
        out[name] = k
    knobs = Knobs(system, src, out, dict(data.get("rules", {})),
                  dict(data.get("generate", {})))
    knobs.check_rules(f"{src}: the defaults", knobs.defaults())
    return knobs


_CTYPES = {"double": "c_double", "int": "c_int", "int64_t": "c_int64"}


def read_exports(lib: Any, knobs: Knobs) -> dict[str, Any]:
    """Each knob's value as a loaded policy .so (a ctypes CDLL) exports it: a choice by its
    name, a switch as a bool; a function the .so lacks gives the knob's `legacy` value
    (ValueError when it has none, or when a choice's or a switch's code is unknown)."""
    import ctypes

    out: dict[str, Any] = {}
    for k in knobs:
        if not hasattr(lib, k.abi):
            if k.legacy is None:
                raise ValueError(f"the .so has no {k.abi}")
            out[k.name] = k.legacy
            continue
        fn = getattr(lib, k.abi)
        fn.restype = getattr(ctypes, _CTYPES[k.c_type])
        v = fn()
        if k.kind == "choice":
            if not 0 <= v < len(k.choices):
                raise ValueError(f"{k.abi}() returned {v}, not one of 0..{len(k.choices) - 1}")
            v = k.choices[v]
        elif k.kind == "bool":
            if v not in (0, 1):
                raise ValueError(f"{k.abi}() returned {v}, not 0 or 1")
            v = bool(v)
        out[k.name] = v
    return out


def declared_systems() -> list[str]:
    """The systems with a settings.toml, in name order."""
    return sorted(p.parent.name for p in SYSTEMS.glob("*/settings.toml"))


def add_options(parser: Any, knobs: Knobs, names: tuple[str, ...] | None = None,
                defaults: dict[str, Any] | None = None,
                shown: dict[str, str] | None = None, prefix: str = "") -> None:
    """The knobs `names` (default: every knob with a flag) as options of an argparse parser,
    dest = the knob's name; `defaults` overrides a knob's default (None: the option is unset
    unless given) and `shown` what --help says of it; `prefix` (`mat-`) goes before each flag
    and, as `mat_`, before each dest."""
    import argparse

    for k in knobs:
        if names is not None and k.name not in names:
            continue
        if not k.flag:
            if names is None:
                continue
            raise ValueError(f"{knobs.source}: knobs.{k.name} has no flag: it is no option")
        flag = f"--{prefix}{k.flag[2:]}"
        dest = prefix.replace("-", "_") + k.name
        default = (defaults or {}).get(k.name, k.default)
        text = (shown or {}).get(k.name, None if default is None else show_value(default))
        shown_ = ("" if text is None else f"; default {text}").replace("%", "%%")
        help_ = k.help.replace("%", "%%")
        if k.kind == "bool":
            parser.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                                default=default, help=f"{help_}{shown_}")
        elif k.kind == "choice":
            parser.add_argument(flag, dest=dest, choices=k.choices, default=default,
                                help=f"{help_}{shown_}")
        else:
            n = k.number
            assert n is not None
            parser.add_argument(flag, dest=dest, type=n, default=default,
                                metavar="N" if k.kind == "int" else "X",
                                help=f"{help_}: {n.expected().replace('%', '%%')}{shown_}")


def show_value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


# --- generated code ------------------------------------------------------------------------


def _banner(k: Knobs) -> str:
    return (f"GENERATED by `python -m flashml.features.codegen` from "
            f"{k.source.relative_to(REPO)}; do not edit.")


def _float_literal(v: float) -> str:
    """A float as Rust and C both read it: 2.0, 0.0001, 1e+15."""
    r = repr(float(v))
    return r if ("." in r or "e" in r or "inf" in r) else r + ".0"


def _comment(style: str, k: Knob) -> list[str]:
    """The knob's help (and unit) as a Rust doc comment (`///`), a Rust comment (`//`) or a C
    comment (`/*`)."""
    text = k.help + (f" ({k.unit})" if k.unit else "")
    if style.startswith("//"):
        lead = style + " "
        return textwrap.wrap(text, 95, initial_indent=lead, subsequent_indent=lead)
    out = textwrap.wrap(text, 95, initial_indent="/* ", subsequent_indent=" * ")
    out[-1] += " */"
    return out


def _limits(k: Knob, int_suffix: str = "") -> list[tuple[str, str, str]]:
    """(comparison, bound literal, what the value must be) for each of the knob's bounds: `v
    <op> <bound>` holds for a value outside it (the same in Rust and C; `int_suffix` goes
    after an integer bound, `ll` in C)."""
    n = k.number
    assert n is not None

    def lit(b: float) -> str:
        return _float_literal(b) if k.kind == "float" else f"{int(b)}{int_suffix}"

    out = []
    if k.min is not None:
        out.append(("<=" if k.min_open else "<", lit(k.min), n.low_text()))
    if k.max is not None:
        out.append((">=" if k.max_open else ">", lit(k.max), n.high_text()))
    return out


def _closed(k: Knob) -> list[tuple[str, float]]:
    """The knob's inclusive bounds as (MIN or MAX, value): the values a clamp may take (an
    open bound has none)."""
    out: list[tuple[str, float]] = []
    if k.min is not None and not k.min_open:
        out.append(("MIN", k.min))
    if k.max is not None and not k.max_open:
        out.append(("MAX", k.max))
    return out


def rust_text(knobs: Knobs) -> str:
    """The simulator's constants and checks (e.g. sim/src/mat/settings.rs)."""
    lines = [f"//! {_banner(knobs)}", "//!",
             f"//! {knobs.system}'s policy knobs: each default, its bounds, its function in the "
             "policy ABI", "//! and (`*_LEGACY`) what a loader takes when a .so lacks that "
             "function.", ""]
    for k in knobs:
        up = k.name.upper()
        # a knob with no default and no ABI name has no constant for its doc: a plain comment
        lines += _comment("///" if k.default is not None or k.abi else "//", k)
        if k.default is None:
            pass
        elif k.kind == "float":
            lines.append(f"pub const {up}: f64 = {_float_literal(k.default)};")
        elif k.kind == "int":
            lines.append(f"pub const {up}: u64 = {int(k.default)};")
        elif k.kind == "choice":
            lines.append(f"pub const {up}: &str = {k.default!r};".replace("'", '"'))
            names = ", ".join(f'"{c}"' for c in k.choices)
            lines.append(f"pub const {up}_CHOICES: [&str; {len(k.choices)}] = [{names}];")
        else:
            lines.append(f"pub const {up}: bool = {str(k.default).lower()};")
        if k.legacy is not None:
            lit = (f'"{k.legacy}"' if k.kind == "choice" else str(k.legacy).lower())
            ty = "&str" if k.kind == "choice" else "bool"
            lines.append(f"pub const {up}_LEGACY: {ty} = {lit};")
        if k.abi:
            lines.append(f'pub const {up}_ABI: &str = "{k.abi}";')
        if k.kind in ("float", "int"):
            ty = "f64" if k.kind == "float" else "i64"
            if bounds := _closed(k):
                lines.append(f"/// `{k.name}`'s inclusive bounds.")
            for label, b in bounds:
                lit = _float_literal(b) if k.kind == "float" else str(int(b))
                lines.append(f"pub const {up}_{label}: {ty} = {lit};")
            lines += ["", f"/// What `{k.name}` must be when `v` is out of its range, or None.",
                      f"pub fn {k.name}_problem(v: {ty}) -> Option<&'static str> {{"]
            if k.kind == "float":
                lines += ["    if !v.is_finite() {", '        return Some("a finite number");',
                          "    }"]
            for op, b, text in _limits(k):
                lines += [f"    if v {op} {b} {{", f'        return Some("{text}");', "    }"]
            lines += ["    None", "}"]
        lines.append("")
    return "\n".join(lines)


def c_text(knobs: Knobs) -> str:
    """The C runtime's constants and checks (e.g. runtime/src/mat/mat_settings.h)."""
    pre = knobs.generate["c_prefix"]
    guard = f"{pre}_SETTINGS_H"
    lines = [f"/* {_banner(knobs)}", " *",
             f" * {knobs.system}'s policy knobs: each default, its bounds, its function in the "
             "policy ABI and", " * (*_LEGACY) what a loader takes when a .so lacks that "
             "function. */", f"#ifndef {guard}", f"#define {guard}", "",
             "#include <math.h>", "#include <stddef.h>", "#include <stdint.h>", ""]
    for k in knobs:
        up = f"{pre}_{k.name.upper()}"
        lines += _comment("/*", k)
        if k.default is None:
            pass
        elif k.kind == "float":
            lines.append(f"#define {up}_DEFAULT {_float_literal(k.default)}")
        elif k.kind == "int":
            lines.append(f"#define {up}_DEFAULT {int(k.default)}ull")
        elif k.kind == "choice":
            lines.append(f"#define {up}_DEFAULT {k.code(k.default)} /* {k.default} */")
            for i, c in enumerate(k.choices):
                lines.append(f"#define {up}_{c.upper()} {i}")
            names = ", ".join(f'"{c}"' for c in k.choices)
            lines.append(f"#define {up}_NAMES {{{names}}}")
        else:
            lines.append(f"#define {up}_DEFAULT {int(k.default)}")
        if k.legacy is not None:
            code = k.code(k.legacy) if k.kind == "choice" else int(k.legacy)
            lines.append(f"#define {up}_LEGACY {code} /* {k.legacy} */")
        if k.abi:
            lines.append(f'#define {up}_ABI "{k.abi}"')
        if k.kind in ("float", "int"):
            ty = "double" if k.kind == "float" else "int64_t"
            if bounds := _closed(k):
                lines.append(f"/* `{k.name}`'s inclusive bounds (plain literals: a message may "
                             "quote them). */")
            for label, b in bounds:
                lit = _float_literal(b) if k.kind == "float" else str(int(b))
                lines.append(f"#define {up}_{label} {lit if b >= 0 else f'({lit})'}")
            fn = f"{pre.lower()}_{k.name}_problem"
            lines += [f"/* What `{k.name}` must be when v is out of its range, or NULL. */",
                      f"static inline const char *{fn}({ty} v) {{"]
            if k.kind == "float":
                lines.append('    if (!isfinite(v)) return "a finite number";')
            for op, b, text in _limits(k, int_suffix="ll"):
                lines.append(f'    if (v {op} {b}) return "{text}";')
            lines += ["    return NULL;", "}"]
        lines.append("")
    lines += [f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def generated_files() -> dict[Path, str]:
    """Every file generated from the systems' settings.toml: path -> text."""
    out: dict[Path, str] = {}
    for system in declared_systems():
        k = load(system)
        if "rust" in k.generate:
            out[REPO / k.generate["rust"]] = rust_text(k)
        if "c" in k.generate:
            out[REPO / k.generate["c"]] = c_text(k)
    return out
