"""Suites: named TOML files of workload groups, expanded into `WorkloadSpec`s.

A suite file:

    name = "brief"
    description = "..."
    [defaults]            # settings for every group (any `attnbench config` field)
    batch_size = 32
    [[group]]             # one grid: every list value is an axis, the product is expanded
    kinds = ["decode"]
    lengths = ["1024,4096,16384,65536", "mixed"]
    dtype = ["float16", "bfloat16"]

Besides settings fields, a group may set spec fields `label`, `trees` (draft-tree names) and
`shared_prefix_len`. `[traffic.NAME]` tables describe a synthetic traffic family for the replay
(`--trace synthetic:NAME`, `workload.synthetic.SyntheticTraffic`); `run` ignores them. Suites are
parsed as TOML, never executed.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, Self

from pydantic import ValidationError

from attnbench.workload.lengths import parse_lengths
from attnbench.workload.models import LayerShape, get_model, layer_shapes
from attnbench.workload.spec import WorkloadSpec

SPEC_EXTRAS = ("label", "trees", "shared_prefix_len")
SCALAR_LISTS = ("context_lengths",)
"""Settings whose value is itself a list: a list of lists in a group is their axis."""


class GridSettings(Protocol):
    """The settings a workload grid is expanded from (`attnbench.config.Settings` is one).

    `model_validate` checks each grid point of a suite again, as a whole, with the settings'
    own rules: the workload layer never imports the settings."""

    @property
    def model(self) -> str | None: ...
    @property
    def tp(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def context_lengths(self) -> list[int]: ...
    @property
    def lengths(self) -> list[str] | None: ...
    @property
    def kinds(self) -> list[Any]: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def kv_layout(self) -> Any: ...
    @property
    def dtype(self) -> str: ...
    @property
    def append_len(self) -> int: ...
    @property
    def prefill_tokens(self) -> int: ...
    def kv_dtypes(self) -> list[str]: ...
    def model_dump(self) -> dict[str, Any]: ...
    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...


class SuiteError(ValueError):
    """A suite that cannot be used: names the file, the group and the field."""


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    defaults: dict[str, Any]
    groups: list[dict[str, Any]]
    source: str


def builtin_suites() -> dict[str, Path]:
    folder = resources.files("attnbench") / "suites"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".toml")}


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a TOML file by path."""
    suites = builtin_suites()
    path = suites.get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise SuiteError(
            f"suite={name_or_path!r} is neither a built-in suite nor a file; built-in: "
            + ", ".join(sorted(suites))
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise SuiteError(f"suite {path}: not a UTF-8 text file (offset {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"suite {path}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - {"name", "description", "defaults", "group", "traffic"})
    if unknown:
        raise SuiteError(
            f"suite {path}: unknown key {unknown[0]!r}; allowed: name, description, defaults, "
            "group, traffic"
        )
    groups = data.get("group", [])
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise SuiteError(f"suite {path}: needs at least one [[group]] table")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SuiteError(f"suite {path}: [defaults] must be a table")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise SuiteError(f"suite {path}: {key} = {data[key]!r} must be a string")
    for where, table in [("[defaults]", defaults)] + [
        (f"group {i}", g) for i, g in enumerate(groups, 1)
    ]:
        empty = [k for k, v in table.items() if v == []]
        if empty:
            raise SuiteError(
                f"suite {path}, {where}: {empty[0]} = [] is empty; give at least one value "
                "(or leave the key out for the default)"
            )
    return Suite(
        name=str(data.get("name", path.stem)),
        description=str(data.get("description", "")),
        defaults=defaults,
        groups=groups,
        source=str(path),
    )


def _axes(group: dict[str, Any]) -> list[dict[str, Any]]:
    """Cartesian product of the group's list values (a list of lists for list settings)."""
    keys, values = [], []
    for k, v in group.items():
        keys.append(k)
        if k in SCALAR_LISTS:
            nested = isinstance(v, list) and bool(v) and isinstance(v[0], list)
            values.append(v if nested else [v])
        elif k == "trees":
            values.append([v])
        else:
            values.append(v if isinstance(v, list) else [v])
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def suite_specs(suite: Suite, base: GridSettings) -> list[WorkloadSpec]:
    """Expand every group of `suite` over `base` settings into specs (deduplicated); each grid
    point is validated as settings of `base`'s own type."""
    specs: dict[str, WorkloadSpec] = {}
    for gi, group in enumerate(suite.groups, 1):
        for point in _axes({**suite.defaults, **group}):
            extras = {k: point.pop(k) for k in SPEC_EXTRAS if k in point}
            merged = {**base.model_dump(), **point}
            try:
                settings = type(base).model_validate(merged)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(p) for p in err["loc"]) or "group"
                raise SuiteError(
                    f"suite {suite.name}, group {gi}: {loc}={err.get('input')!r}: "
                    + err["msg"].removeprefix("Value error, ")
                ) from None
            try:
                for spec in settings_specs(settings, **extras):
                    specs.setdefault(spec.case_id, spec)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(p) for p in err["loc"]) or "spec"
                raise SuiteError(
                    f"suite {suite.name}, group {gi}: {loc}={err.get('input')!r}: {err['msg']}"
                ) from None
            except (ValueError, TypeError) as exc:
                raise SuiteError(f"suite {suite.name}, group {gi}: {exc}") from None
    return list(specs.values())


def settings_specs(
    s: GridSettings,
    *,
    label: str = "",
    trees: list[str] | None = None,
    shared_prefix_len: int = 0,
) -> list[WorkloadSpec]:
    """The grid the settings describe: kinds x length cases x kv dtypes."""
    if s.model:  # one shape per layer kind (MLA; windowed and full layers; sinks)
        layers = layer_shapes(get_model(s.model), s.tp)
    else:
        layers = [LayerShape(s.num_heads, s.num_kv_heads, s.head_dim, 1)]
    dists = s.lengths or [",".join(str(n) for n in s.context_lengths), "mixed"]
    specs = []
    for kind in s.kinds:
        cases = [case for dist in dists for case in parse_lengths(dist, s.batch_size, s.seed)]
        for case, kv_dtype in itertools.product(cases, s.kv_dtypes()):
            prefix = shared_prefix_len or case.shared_prefix_len
            queries = _queries(kind, case.kv_lens, s, trees)
            for (qo_lens, kv), layer in itertools.product(queries, layers):
                common = _spec_fields(s, layer, kv_dtype, case.label, label)
                specs.append(_make(kind, kv, qo_lens, common, trees, prefix))
    return [sp for group in specs for sp in group]


def _spec_fields(
    s: GridSettings, layer: LayerShape, kv_dtype: str, lengths: str, label: str
) -> dict[str, Any]:
    """The fields every spec of one (layer, kv dtype, length case) shares."""
    return dict(
        num_qo_heads=layer.num_qo_heads,
        num_kv_heads=layer.num_kv_heads,
        head_dim=layer.head_dim,
        page_size=s.page_size,
        kv_layout=s.kv_layout,
        dtype=s.dtype,
        kv_dtype=kv_dtype,
        seed=s.seed,
        model=s.model,
        tp=s.tp,
        num_layers=layer.num_layers,
        lengths=lengths,
        label=label,
        **layer.spec_fields,
    )


def _queries(
    kind: str, kv_lens: tuple[int, ...], s: GridSettings, trees: list[str] | None
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(qo_lens, kv_lens) for a kind: decode 1 token; append `append_len` new tokens on top of
    the context; prefill the whole prompt, the batch capped at `prefill_tokens` tokens."""
    if kind in ("decode", "shared_prefix"):
        return [((1,) * len(kv_lens), kv_lens)]
    if kind == "append":
        return [(tuple(s.append_len for _ in kv_lens), tuple(n + s.append_len for n in kv_lens))]
    if kind == "prefill":
        kept: list[int] = []
        for n in kv_lens:
            if kept and sum(kept) + n > s.prefill_tokens:
                break
            kept.append(n)
        return [(tuple(kept), tuple(kept))]
    if kind == "tree":
        return [((0,) * len(kv_lens), kv_lens)]  # filled per tree in _make
    raise ValueError(f"kind={kind!r} is not known")


def _make(
    kind: str,
    kv_lens: tuple[int, ...],
    qo_lens: tuple[int, ...],
    common: dict[str, Any],
    trees: list[str] | None,
    shared_prefix_len: int,
) -> list[WorkloadSpec]:
    if kind == "tree":
        from attnbench.workload.trees import get_tree

        out = []
        for name in trees or ["chain-8"]:
            tree = get_tree(name)
            n = tree.num_nodes
            out.append(
                WorkloadSpec(
                    kind="tree",
                    kv_lens=tuple(k + n for k in kv_lens),
                    qo_lens=(n,) * len(kv_lens),
                    tree=tree,
                    causal=False,
                    **common,
                )
            )
        return out
    if kind == "shared_prefix":
        prefix = shared_prefix_len or min(kv_lens) // 2
        return [
            WorkloadSpec(
                kind="shared_prefix",
                kv_lens=kv_lens,
                qo_lens=qo_lens,
                shared_prefix_len=prefix,
                **common,
            )
        ]
    return [WorkloadSpec(kind=kind, kv_lens=kv_lens, qo_lens=qo_lens, **common)]
