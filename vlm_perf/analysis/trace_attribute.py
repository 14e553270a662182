"""The attribution engine of `vlm_perf.analysis.trace_parts`, one rank at a time, in bounded memory.

``rank_parts(rank, events)`` attributes one rank's events (a frame of the `vlm_perf.ingest.traces` table)
and returns a `RankParts` (plain rows, picklable: the map step a worker process runs); ``combine`` turns
the ranks' results, in rank order, into the `TraceParts` tables (the reduce step). ``attribute(events)``
is both on one table: ``combine([rank_parts(r, ev) for r, ev in ranks of events])``.

Memory. The per-event state is numpy arrays over the rank's rows (the context of every host event is a
4-byte id into a table of the distinct contexts; names are codes into the distinct names); Python
objects exist only for a window at a time: host events are walked in time order in slices of `WINDOW`
rows, device events one profiler step at a time (the elementary-interval sweep needs that step's events
only). So beyond the event table itself, the peak is a few numpy values per event plus one step's device
events as Python objects (`docs/traces.md`, "Reading large traces").

The rules and the order of every accumulation are those of the module docstring of `trace_parts`;
the results are identical to the event-by-event formulation (tested on real and fuzzed traces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..errors import InputError
from .trace_parts import _EVAL, Ctx, TraceParts, _direction, _module_update, _op_update, _range_update, \
    classify_kernel, label_of

__all__ = ["RankParts", "rank_parts", "combine", "attribute", "WINDOW"]

#: host events turned into Python values at a time
WINDOW = 1 << 16
_KINDS = ("cpu_op", "annotation", "module", "runtime", "kernel", "memcpy", "memset", "gpu_annotation")
_CPU_OP, _ANNOTATION, _MODULE, _RUNTIME, _KERNEL, _MEMCPY, _MEMSET = range(7)
_CLASS_SUFFIX = re.compile(r"_\d+$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NVTX_STEP = re.compile(r"^(?:step|iteration|train_step)[ _#:=]*(\d+)$", re.IGNORECASE)


@dataclass
class RankParts:
    """One rank's attribution, before iterations are known: ``parts`` rows (step, part, direction, time_ns),
    ``steps`` rows (step, step_ns, attributed_ns, device, comm_ns, overlap_ns), ``top`` rows (name, part,
    time_ns, count) in first-seen order, ``shape`` {(step, part): matmul FLOPs}; ``profiler_steps``: the steps
    are ProfilerStep#N ranges (numbered from 0), not NVTX "step N" ranges naming their iteration."""

    rank: int
    parts: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    top: list = field(default_factory=list)
    shape: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    profiler_steps: bool = False


class _Ctxs:
    """The distinct contexts of a rank (id 0: the empty context) and the cached rule updates between them."""

    def __init__(self) -> None:
        self.list: list[Ctx] = []
        self.index: dict[Ctx, int] = {}
        self.cache: dict[tuple, int] = {}
        self.id(Ctx())

    def id(self, ctx: Ctx) -> int:
        got = self.index.get(ctx)
        if got is None:
            got = self.index[ctx] = len(self.list)
            self.list.append(ctx)
        return got

    def backward(self, cid: int, special: str | None = None) -> int:
        key = ("b", cid, special)
        got = self.cache.get(key)
        if got is None:
            c = self.list[cid]
            got = self.cache[key] = self.id(Ctx(c.zone, c.sub, special or c.special, True, c.in_module))
        return got


class _Rank:
    """A rank's events as numpy columns (zero-copy where polars allows), kinds and names as small integer codes."""

    def __init__(self, ev: pl.DataFrame) -> None:
        kind = ev["kind"]
        if kind.dtype != pl.Enum(list(_KINDS)):
            kind = kind.cast(pl.String).cast(pl.Enum(list(_KINDS)))
        self.kind = kind.to_physical().to_numpy().astype(np.int8, copy=False)
        names = ev["name"]
        self.names: list[str] = names.unique(maintain_order=True).to_list()
        self.name = names.cast(pl.Enum(self.names)).to_physical().to_numpy()
        for col in ("start", "end", "pid", "tid", "ext", "corr", "seq", "fwd_tid", "flops"):
            setattr(self, col, ev[col].to_numpy())
        self.n = ev.height


def _contexts(r: _Rank, ctxs: _Ctxs, want_children: bool):
    """The context id of every host event (-1 elsewhere), the nesting children per row (CPU-only traces),
    and the ends clipped to the enclosing event. One pass over the host events in time order (start, then the
    longer first), per thread a stack of the open events."""
    host = np.flatnonzero(r.kind <= _RUNTIME)
    order = host[np.lexsort((-r.end[host], r.start[host]))]
    ctx_id = np.full(r.n, -1, dtype=np.int32)
    clipped = r.end.copy()
    children: dict[int, list] | None = {} if want_children else None
    stacks: dict[tuple[int, int], list] = {}
    fwd_ctx: dict[int, int] = {}  # forward sequence number -> context id of the op that made the node
    names, cache, clist = r.names, ctxs.cache, ctxs.list
    node_of: dict[int, str | None] = {}
    for a in range(0, len(order), WINDOW):
        rows_np = order[a:a + WINDOW]
        rows, kinds, codes = rows_np.tolist(), r.kind[rows_np].tolist(), r.name[rows_np].tolist()
        pids, tids = r.pid[rows_np].tolist(), r.tid[rows_np].tolist()
        starts, ends = r.start[rows_np].tolist(), r.end[rows_np].tolist()
        seqs, fwds = r.seq[rows_np].tolist(), r.fwd_tid[rows_np].tolist()
        out = [0] * len(rows)
        for i in range(len(rows)):
            key = (pids[i], tids[i])
            stack = stacks.get(key)
            if stack is None:
                stack = stacks[key] = []
            s, e = starts[i], ends[i]
            while stack and stack[-1][2] <= s:
                stack.pop()
            if stack:
                prow, cid, pe = stack[-1]
                if e > pe:
                    e = pe
                    clipped[rows[i]] = e
                if children is not None:
                    children.setdefault(prow, []).append(rows[i])
            else:
                cid = 0
            kind, code = kinds[i], codes[i]
            if kind == _MODULE:
                got = cache.get((_MODULE, cid, code))
                if got is None:
                    cls = _CLASS_SUFFIX.sub("", names[code][len("nn.Module: "):])
                    got = cache[(_MODULE, cid, code)] = ctxs.id(_module_update(clist[cid], cls))
                cid = got
            elif kind == _ANNOTATION:
                got = cache.get((_ANNOTATION, cid, code))
                if got is None:
                    got = cache[(_ANNOTATION, cid, code)] = ctxs.id(_range_update(clist[cid], names[code]))
                cid = got
            elif kind == _CPU_OP:
                node = node_of.get(code, "")
                if node == "":
                    name = names[code]
                    node = node_of[code] = name[len(_EVAL):] if name.startswith(_EVAL) else None
                if node is not None:
                    if "AccumulateGrad" in node:
                        cid = ctxs.backward(cid, "grad_accumulation")
                    else:
                        f = fwd_ctx.get(seqs[i]) if seqs[i] >= 0 else None
                        cid = ctxs.backward(cid if f is None else f)
                else:
                    got = cache.get((_CPU_OP, cid, code))
                    if got is None:
                        got = cache[(_CPU_OP, cid, code)] = ctxs.id(_op_update(clist[cid], names[code]))
                    cid = got
                    # every forward op carries the sequence number the next autograd node will get; the node
                    # is made by the last of them (the number then moves on), so the last one wins
                    if seqs[i] >= 0 and fwds[i] <= 0 and not clist[cid].backward:
                        fwd_ctx[seqs[i]] = cid
            out[i] = cid
            stack.append((rows[i], cid, e))
        ctx_id[rows_np] = out
    return ctx_id, children, clipped


def _steps_of(ev: pl.DataFrame, rank: int, notes: list[str]) -> tuple[list[tuple[int, int, int, int]], bool]:
    """(row, step number, start, end) of the ProfilerStep ranges (or of NVTX "step N" ranges, or one
    pseudo-step over the whole trace), and whether they are ProfilerStep ranges (numbered from 0)."""
    ann = ev.with_row_index("row").filter(pl.col("kind") == "annotation").select("row", "name", "start", "end")
    out = []
    for pattern in (_STEP, _NVTX_STEP):  # ProfilerStep#N; else NVTX / record_function "step N" ranges
        for row, name, s, e in ann.iter_rows():
            m = pattern.match(name)
            if m and e > s:
                out.append((int(row), int(m.group(1)), int(s), int(e)))
        if out:
            return sorted(out, key=lambda r: r[2]), pattern is _STEP
    notes.append(f"rank {rank}: no ProfilerStep#N ranges (profile.step() not called): the whole trace is one "
                 "step, iterations unknown")
    return [(-1, -1, int(ev["start"].min()), int(ev["end"].max()))], False  # type: ignore[arg-type]


def rank_parts(rank: int, ev: pl.DataFrame) -> RankParts:
    """Attribute one rank's events (see `trace_parts`' module docstring)."""
    out = RankParts(rank)
    r = _Rank(ev)
    ctxs = _Ctxs()
    device = np.flatnonzero((r.kind >= _KERNEL) & (r.kind <= _MEMSET))
    ctx_id, children, clipped = _contexts(r, ctxs, want_children=device.size == 0)
    steps, out.profiler_steps = _steps_of(ev, rank, out.notes)
    _shape_flops(r, ctx_id, ctxs, steps, out.shape)
    top: dict[tuple[int, str], list] = {}
    if device.size:
        _device_partition(rank, r, device, steps, ctx_id, ctxs, out, top)
    else:
        _host_partition(ev, r, steps, ctx_id, ctxs, children, clipped, out, top)
    out.top = [(r.names[code], part, v[0], v[1]) for (code, part), v in top.items()]
    return out


def _shape_flops(r: _Rank, ctx_id, ctxs: _Ctxs, steps, shape: dict) -> None:
    """Matmul FLOPs of the recorded ops, by the step holding the op's start and the op's part."""
    mm = np.flatnonzero((r.kind == _CPU_OP) & (r.flops > 0))
    if mm.size == 0:
        return
    starts = np.array([s for _, _, s, _ in steps])
    ends = np.array([e for _, _, _, e in steps])
    k = np.searchsorted(starts, r.start[mm], side="right") - 1
    ok = k >= 0
    ok[ok] = r.start[mm][ok] < ends[k[ok]]
    labels = {}
    for row, kk, flops in zip(mm[ok].tolist(), k[ok].tolist(), r.flops[mm][ok].tolist()):
        cid = int(ctx_id[row])
        part = labels.get(cid)
        if part is None:
            part = labels[cid] = label_of(ctxs.list[cid], "cpu_op")
        key = (steps[kk][1], part)
        shape[key] = shape.get(key, 0) + flops


def _host_partition(ev, r: _Rank, steps, ctx_id, ctxs: _Ctxs, children, clipped, out: RankParts, top: dict) -> None:
    """CPU-only traces: every instant of a step to the innermost host event covering it (self time)."""
    for row, step, s, e in steps:
        acc: dict[tuple[str, str], int] = {}
        if row >= 0:
            _self_times(row, s, e, r, ctx_id, ctxs, children, clipped, acc, top)
        else:  # no step range: the top-level events, plus the uncovered time as host
            covered = 0
            for t in _top_level(ev, clipped):
                covered += _self_times(t, int(r.start[t]), int(clipped[t]), r, ctx_id, ctxs, children, clipped, acc,
                                       top)
            acc[("host", "none")] = acc.get(("host", "none"), 0) + (e - s) - covered
        total = 0
        for (part, direction), t in acc.items():
            out.parts.append((step, part, direction, t))
            total += t
        out.steps.append((step, e - s, total, "cpu", 0, 0))


def _top_level(ev: pl.DataFrame, clipped: np.ndarray) -> list[int]:
    """The outermost host events of the busiest thread (the one whose events cover the most time)."""
    host = ev.with_row_index("row").filter(pl.col("kind").is_in(["cpu_op", "annotation", "module"]))
    busiest = host.group_by("pid", "tid").agg((pl.col("end") - pl.col("start")).sum().alias("t")).sort(
        "t", descending=True).head(1)
    host = host.join(busiest.select("pid", "tid"), on=["pid", "tid"])
    found: list[int] = []
    ends: dict[tuple[int, int], int] = {}
    for row, pid, tid, s in host.sort("start").select("row", "pid", "tid", "start").iter_rows():
        key = (pid, tid)
        if s >= ends.get(key, -1):
            found.append(row)
            ends[key] = int(clipped[row])
    return found


def _self_times(row: int, s: int, e: int, r: _Rank, ctx_id, ctxs: _Ctxs, children, clipped, acc: dict,
                top: dict) -> int:
    """Add the self time of ``row``'s subtree (clipped to [s, e]) to ``acc``; returns the time added."""
    added = 0
    todo = [row]
    while todo:
        x = todo.pop()
        rs, re_ = max(int(r.start[x]), s), min(int(clipped[x]), e)
        if re_ <= rs:
            continue
        own = re_ - rs
        for c in children.get(x, ()):
            cs, ce = max(int(r.start[c]), rs), min(int(clipped[c]), re_)
            if ce > cs:
                own -= ce - cs
                todo.append(c)
        ctx, kind = ctxs.list[int(ctx_id[x])], _KINDS[r.kind[x]]
        part = label_of(ctx, kind)
        key = (part, _direction(ctx))
        acc[key] = acc.get(key, 0) + own
        added += own
        if kind == "cpu_op" and own > 0:
            t = top.setdefault((int(r.name[x]), part), [0, 0])
            t[0] += own
            t[1] += 1
    return added


def _lookup(keys: np.ndarray, rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each wanted key (-1 when absent); ``keys`` sorted and unique."""
    if keys.size == 0 or wanted.size == 0:
        return np.full(wanted.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return np.where(keys[pos] == wanted, rows[pos], -1)


def _first_rows(r: _Rank, kind: int, col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids >= 0, the first row holding each) among the events of ``kind``."""
    rows = np.flatnonzero((r.kind == kind) & (col >= 0))
    keys, first = np.unique(col[rows], return_index=True)
    return keys, rows[first]


def _device_labels(r: _Rank, device: np.ndarray, ctx_id, ctxs: _Ctxs, notes: list[str], rank: int):
    """Per device event, an index into the returned (part, direction, class) labels; class: compute | comm |
    memory. A kernel / memcpy / memset takes the context of its launch (``correlation`` -> runtime call, else
    ``External id`` -> op); communication kernels are ``communication.<collective>``."""
    corr_keys, corr_rows = _first_rows(r, _RUNTIME, r.corr)
    ext_keys, ext_rows = _first_rows(r, _CPU_OP, r.ext)
    dcorr, dext = r.corr[device], r.ext[device]
    launch = np.full(device.size, -1, dtype=np.int64)
    has = dcorr >= 0
    launch[has] = _lookup(corr_keys, corr_rows, dcorr[has])
    need = (launch < 0) & (dext >= 0)
    launch[need] = _lookup(ext_keys, ext_rows, dext[need])
    dcid = np.where(launch >= 0, ctx_id[np.maximum(launch, 0)], -1).astype(np.int64)
    dkind = r.kind[device].astype(np.int64)
    dname = r.name[device]
    comm_names: list[str] = []
    comm_of = np.full(len(r.names), -1, dtype=np.int64)
    for code in np.unique(dname[dkind == _KERNEL]).tolist():
        comm = classify_kernel(r.names[code])
        if comm is not None:
            if comm not in comm_names:
                comm_names.append(comm)
            comm_of[code] = comm_names.index(comm)
    dcomm = np.where(dkind == _KERNEL, comm_of[dname], -1)
    width = len(comm_names) + 1
    key = ((dcid + 1) * 8 + dkind) * width + (dcomm + 1)
    uniq, inverse = np.unique(key, return_inverse=True)
    labels = []
    for k in uniq.tolist():
        comm_i = k % width - 1
        kind = (k // width) % 8
        cid = k // width // 8 - 1
        ctx = Ctx() if cid < 0 else ctxs.list[cid]
        direction = _direction(ctx)
        if comm_i >= 0:
            labels.append((comm_names[comm_i], direction, "comm"))
        elif kind == _MEMCPY:
            labels.append(("memory_copy", direction, "memory"))
        elif kind == _MEMSET:
            labels.append(("memset", direction, "memory"))
        else:
            labels.append(("unattributed" if cid < 0 else label_of(ctx, "cpu_op"), direction, "compute"))
    unlinked = int((launch < 0).sum())
    if unlinked:
        notes.append(f"rank {rank}: {unlinked} of {device.size} device events have no launch in the trace "
                     "(no correlation / External id match): unattributed")
    if np.unique(r.pid[device]).size > 1:
        notes.append(f"rank {rank}: device events on {np.unique(r.pid[device]).size} devices; their intervals are "
                     "merged into one timeline")
    return labels, inverse.reshape(-1)


def _device_partition(rank: int, r: _Rank, device: np.ndarray, steps, ctx_id, ctxs: _Ctxs, out: RankParts,
                      top: dict) -> None:
    """Each step window partitioned into elementary intervals: compute kernels active -> split equally among
    them; else communication; else memory copies; else idle (data loading while the host loads data)."""
    labels, dlab = _device_labels(r, device, ctx_id, ctxs, out.notes, rank)
    # host data-loading ranges (merged intervals): device idle time under them is data loading
    loading_ctx = np.array([c.special == "data_loading" for c in ctxs.list])
    ann = np.flatnonzero(r.kind == _ANNOTATION)
    ann = ann[loading_ctx[ctx_id[ann]]]
    loading = _merge_intervals(list(zip(r.start[ann].tolist(), r.end[ann].tolist())))
    d_start, d_end, d_name = r.start[device], r.end[device], r.name[device]
    order = np.argsort(d_start, kind="stable")
    sorted_start = d_start[order]
    ended_by = np.maximum.accumulate(d_end[order])  # the latest end among the events up to each position
    for _row, step, s, e in steps:
        acc: dict[tuple[str, str], float] = {}
        comm_ns = overlap_ns = 0
        # the events overlapping [s, e], in start order: those starting before e and ending after s (before the
        # first position whose running latest end passes s, every event has ended by s)
        lo = int(np.searchsorted(ended_by, s, side="right"))
        hi = int(np.searchsorted(sorted_start, e, side="left"))
        cand = order[lo:hi]
        sel = cand[d_end[cand] > s]
        lab = [labels[x] for x in dlab[sel].tolist()]
        names = d_name[sel].tolist()
        for k in range(len(lab)):
            top.setdefault((names[k], lab[k][0]), [0, 0])[1] += 1
        # sweep of elementary intervals over [s, e]
        bounds: list[tuple[int, int, int]] = []  # (time, +1/-1, index)
        for k, (a, b) in enumerate(zip(d_start[sel].tolist(), d_end[sel].tolist())):
            bounds.append((max(a, s), 1, k))
            bounds.append((min(b, e), -1, k))
        bounds.sort(key=lambda b: (b[0], b[1]))
        active: dict[int, None] = {}
        t = s
        for time, sign, i in bounds + [(e, 0, -1)]:
            if time > t:
                span = time - t
                if not active and loading:
                    # device idle while the host loads data: charged to data_loading, not to idle
                    waited = _overlap(loading, t, time)
                    if waited:
                        acc[("data_loading", "none")] = acc.get(("data_loading", "none"), 0) + waited
                        span -= waited
                _spread(span, active, lab, acc, top, names)
                classes = {lab[j][2] for j in active}
                if "comm" in classes:
                    comm_ns += span
                    if "compute" in classes:
                        overlap_ns += span
                t = time
            if sign > 0:
                active[i] = None
            elif sign < 0:
                active.pop(i, None)
        total = 0
        for (part, direction), v in acc.items():
            out.parts.append((step, part, direction, int(round(v))))
            total += int(round(v))
        out.steps.append((step, e - s, total, "gpu", comm_ns, overlap_ns))


def _merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _overlap(intervals: list[tuple[int, int]], s: int, e: int) -> int:
    """Length of [s, e) covered by sorted disjoint ``intervals``."""
    import bisect

    k = max(0, bisect.bisect_right(intervals, (s, s)) - 1)
    total = 0
    while k < len(intervals) and intervals[k][0] < e:
        a, b = intervals[k]
        if b > s:
            total += min(b, e) - max(a, s)
        k += 1
    return total


def _spread(span: int, active: dict, labels, acc: dict, top: dict, names) -> None:
    if span <= 0:
        return
    if not active:
        acc[("idle", "none")] = acc.get(("idle", "none"), 0) + span
        return
    for cls in ("compute", "comm", "memory"):
        group = [j for j in active if labels[j][2] == cls]
        if group:
            share = span / len(group)
            for j in group:
                part, direction, _ = labels[j]
                acc[(part, direction)] = acc.get((part, direction), 0) + share
                t = top.setdefault((names[j], part), [0, 0])
                t[0] += int(share)
            return


# ------------------------------------------------------------------------------------------------ reduce
def _iteration(step: int, profiler_steps: bool, first_iteration: int | None) -> int | None:
    if step < 0:
        return None
    if not profiler_steps:
        return step  # an NVTX "step N" range names its iteration
    return None if first_iteration is None else step + first_iteration


def combine(ranks: list[RankParts], first_iteration: int | None) -> TraceParts:
    """The ranks' results (in rank order) as one `TraceParts`; ``first_iteration``: the training iteration of
    ``ProfilerStep#0`` (None: iterations unknown, left null)."""
    part_rows: list[tuple] = []
    step_rows: list[tuple] = []
    top_rows: dict[tuple[str, str], list] = {}
    shape_rows: list[tuple] = []
    notes: list[str] = []
    for rp in ranks:
        its = {step: _iteration(step, rp.profiler_steps, first_iteration) for step, *_ in rp.steps}
        part_rows += [(rp.rank, step, its[step], part, d, t) for step, part, d, t in rp.parts]
        step_rows += [(rp.rank, step, its[step], *rest) for step, *rest in rp.steps]
        for name, part, t, c in rp.top:
            got = top_rows.setdefault((name, part), [0, 0])
            got[0] += t
            got[1] += c
        shape_rows += [(rp.rank, step, part, f) for (step, part), f in rp.shape.items()]
        notes += rp.notes
    parts = pl.DataFrame(part_rows, orient="row", schema={"rank": pl.Int64, "step": pl.Int64, "iteration": pl.Int64,
                                                          "part": pl.String, "direction": pl.String,
                                                          "time_ns": pl.Int64})
    parts = parts.group_by("rank", "step", "iteration", "part", "direction").agg(pl.col("time_ns").sum()).sort(
        "rank", "step", "part", "direction")
    steps = pl.DataFrame(step_rows, orient="row", schema={"rank": pl.Int64, "step": pl.Int64, "iteration": pl.Int64,
                                                          "step_ns": pl.Int64, "attributed_ns": pl.Int64,
                                                          "device": pl.String, "comm_ns": pl.Int64,
                                                          "overlap_ns": pl.Int64})
    top = pl.DataFrame([(k[0], k[1], v[0], v[1]) for k, v in top_rows.items()], orient="row",
                       schema={"name": pl.String, "part": pl.String, "time_ns": pl.Int64, "count": pl.Int64})
    attention = top.filter(pl.col("part").str.ends_with(".attention")).select("name", "part", "count")
    top = top.sort("time_ns", descending=True).head(50)
    shape = pl.DataFrame(shape_rows, orient="row", schema={"rank": pl.Int64, "step": pl.Int64, "part": pl.String,
                                                           "flops": pl.Int64})
    shape = shape.group_by("rank", "step", "part").agg(pl.col("flops").sum()).sort("rank", "step", "part")
    return TraceParts(parts=parts, steps=steps, top=top, notes=list(dict.fromkeys(notes)), shape_flops=shape,
                      attention_ops=attention)


def attribute(events: pl.DataFrame, first_iteration: int | None = None) -> TraceParts:
    """Attribute every step's time to parts, rank by rank (see `trace_parts`' module docstring)."""
    if events.height == 0:
        raise InputError("the trace holds no timed events")
    ranks = events.partition_by("rank", as_dict=True, maintain_order=True)
    return combine([rank_parts(int(rank), ev) for (rank,), ev in ranks.items()], first_iteration)
