"""The event-by-event attribution as it was before the bounded-memory engine (`vlm_perf.analysis.trace_attribute`),
kept here as the oracle the new engine must equal table for table (tests/analysis/test_trace_streaming.py): Python
lists over every event, a dict of contexts per row, each step's device events in full. Not used by the package."""

# ruff: noqa
from __future__ import annotations

import re

import numpy as np
import polars as pl

from vlm_perf.analysis.trace_parts import (_CLASS_SUFFIX, _EVAL, Ctx, TraceParts, _direction, _module_update,
                                           _op_update, _range_update, classify_kernel, label_of)
from vlm_perf.errors import InputError

# -------------------------------------------------------------------------------------------- attribution
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NVTX_STEP = re.compile(r"^(?:step|iteration|train_step)[ _#:=]*(\d+)$", re.IGNORECASE)


def attribute(events: pl.DataFrame, first_iteration: int | None = None) -> TraceParts:
    """Attribute every step's time to parts (see the module docstring). ``first_iteration``: the training
    iteration of ``ProfilerStep#0`` (None: iterations unknown, left null)."""
    if events.height == 0:
        raise InputError("the trace holds no timed events")
    part_rows: list[dict] = []
    step_rows: list[dict] = []
    top_rows: dict[tuple[str, str], list] = {}
    notes: list[str] = []
    shape_rows: list[dict] = []
    for (rank,), ev in events.partition_by("rank", as_dict=True, maintain_order=True).items():
        _attribute_rank(int(rank), ev, first_iteration, part_rows, step_rows, top_rows, notes, shape_rows)
    parts = pl.DataFrame(part_rows, schema={"rank": pl.Int64, "step": pl.Int64, "iteration": pl.Int64,
                                            "part": pl.String, "direction": pl.String, "time_ns": pl.Int64})
    parts = parts.group_by("rank", "step", "iteration", "part", "direction").agg(pl.col("time_ns").sum()).sort(
        "rank", "step", "part", "direction")
    steps = pl.DataFrame(step_rows, schema={"rank": pl.Int64, "step": pl.Int64, "iteration": pl.Int64,
                                            "step_ns": pl.Int64, "attributed_ns": pl.Int64, "device": pl.String,
                                            "comm_ns": pl.Int64, "overlap_ns": pl.Int64})
    top = pl.DataFrame([{"name": k[0], "part": k[1], "time_ns": v[0], "count": v[1]} for k, v in top_rows.items()],
                       schema={"name": pl.String, "part": pl.String, "time_ns": pl.Int64, "count": pl.Int64})
    attention = top.filter(pl.col("part").str.ends_with(".attention")).select("name", "part", "count")
    top = top.sort("time_ns", descending=True).head(50)
    shape = pl.DataFrame(shape_rows, schema={"rank": pl.Int64, "step": pl.Int64, "part": pl.String,
                                             "flops": pl.Int64})
    shape = shape.group_by("rank", "step", "part").agg(pl.col("flops").sum()).sort("rank", "step", "part")
    return TraceParts(parts=parts, steps=steps, top=top, notes=list(dict.fromkeys(notes)), shape_flops=shape,
                      attention_ops=attention)


def _host_contexts(ev: pl.DataFrame) -> tuple[dict[int, tuple[Ctx, str]], dict[int, list], np.ndarray]:
    """Context of every host event (by row index), the nesting children per row, and the clipped ends."""
    host = ev.with_row_index("row").filter(pl.col("kind").is_in(["cpu_op", "annotation", "module", "runtime"]))
    host = host.sort("start", pl.col("end"), descending=[False, True])
    rows = host["row"].to_list()
    kinds = host["kind"].cast(pl.String).to_list()
    names = host["name"].to_list()
    tids = list(zip(host["pid"].to_list(), host["tid"].to_list()))
    starts = host["start"].to_list()
    ends = host["end"].to_list()
    seqs = host["seq"].to_list()
    fwd = host["fwd_tid"].to_list()
    ctx_of: dict[int, tuple[Ctx, str]] = {}
    children: dict[int, list] = {}
    clipped = ev["end"].to_numpy().copy()
    stacks: dict[tuple[int, int], list] = {}
    fwd_ctx: dict[int, Ctx] = {}   # forward sequence number -> context of the op that made the node
    empty = Ctx()
    for i in range(len(rows)):
        key = tids[i]
        stack = stacks.setdefault(key, [])
        s, e = starts[i], ends[i]
        while stack and clipped[stack[-1][0]] <= s:
            stack.pop()
        parent = stack[-1] if stack else None
        if parent is not None:
            pe = clipped[parent[0]]
            if e > pe:
                e = pe
            clipped[rows[i]] = e
            children.setdefault(parent[0], []).append(rows[i])
            ctx = parent[1]
        else:
            ctx = empty
        name, kind = names[i], kinds[i]
        if kind == "module":
            ctx = _module_update(ctx, _CLASS_SUFFIX.sub("", name[len("nn.Module: "):]))
        elif kind == "annotation":
            ctx = _range_update(ctx, name)
        elif kind == "cpu_op":
            if name.startswith(_EVAL):
                node = name[len(_EVAL):]
                if "AccumulateGrad" in node:
                    ctx = Ctx(ctx.zone, ctx.sub, "grad_accumulation", True, ctx.in_module)
                else:
                    f = fwd_ctx.get(seqs[i]) if seqs[i] >= 0 else None
                    if f is not None:
                        ctx = Ctx(f.zone, f.sub, f.special, True, f.in_module)
                    else:
                        ctx = Ctx(ctx.zone, ctx.sub, ctx.special, True, ctx.in_module)
            else:
                ctx = _op_update(ctx, name)
                # every forward op carries the sequence number the next autograd node will get; the node
                # is made by the last of them (the number then moves on), so the last one wins
                if seqs[i] >= 0 and fwd[i] <= 0 and not ctx.backward:
                    fwd_ctx[seqs[i]] = ctx
        ctx_of[rows[i]] = (ctx, kind)
        stack.append((rows[i], ctx))
    return ctx_of, children, clipped


def _steps_of(ev: pl.DataFrame, rank: int, notes: list[str]) -> tuple[list[tuple[int, int, int, int]], bool]:
    """(row, step number, start, end) of the ProfilerStep ranges (or of NVTX "step N" ranges, or one
    pseudo-step over the whole trace), and whether they are ProfilerStep ranges (numbered from 0)."""
    ann = ev.with_row_index("row").filter(pl.col("kind") == "annotation")
    out = []
    for pattern in (_STEP, _NVTX_STEP):  # ProfilerStep#N; else NVTX / record_function "step N" ranges
        for row, name, s, e in ann.select("row", "name", "start", "end").iter_rows():
            m = pattern.match(name)
            if m and e > s:
                out.append((int(row), int(m.group(1)), int(s), int(e)))
        if out:
            return sorted(out, key=lambda r: r[2]), pattern is _STEP
    if not out:
        notes.append(f"rank {rank}: no ProfilerStep#N ranges (profile.step() not called): the whole trace is one "
                     "step, iterations unknown")
    return [(-1, -1, int(ev["start"].min()), int(ev["end"].max()))], False  # type: ignore[arg-type]


def _attribute_rank(rank: int, ev: pl.DataFrame, first_iteration: int | None, part_rows: list, step_rows: list,
                    top: dict, notes: list[str], shape_rows: list) -> None:
    ctx_of, children, clipped = _host_contexts(ev)
    steps, profiler_steps = _steps_of(ev, rank, notes)
    _shape_flops(rank, ev, steps, ctx_of, shape_rows)
    device = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    names = ev["name"].to_list()
    kinds = ev["kind"].cast(pl.String).to_list()
    starts = ev["start"].to_list()

    def iteration(step: int) -> int | None:
        if step < 0:
            return None
        if not profiler_steps:
            return step  # an NVTX "step N" range names its iteration
        return None if first_iteration is None else step + first_iteration

    if device.height:
        _device_partition(rank, ev, device, steps, ctx_of, iteration, part_rows, step_rows, top, notes)
        return
    for row, step, s, e in steps:
        acc: dict[tuple[str, str], int] = {}
        if row >= 0:
            _self_times(row, s, e, ctx_of, children, clipped, starts, names, kinds, acc, top)
        else:  # no step range: the top-level events, plus the uncovered time as host
            covered = 0
            tops = _top_level(ev, clipped)
            for r in tops:
                covered += _self_times(r, starts[r], int(clipped[r]), ctx_of, children, clipped, starts, names,
                                       kinds, acc, top)
            acc[("host", "none")] = acc.get(("host", "none"), 0) + (e - s) - covered
        total = 0
        for (part, direction), t in acc.items():
            part_rows.append({"rank": rank, "step": step, "iteration": iteration(step), "part": part,
                              "direction": direction, "time_ns": t})
            total += t
        step_rows.append({"rank": rank, "step": step, "iteration": iteration(step), "step_ns": e - s,
                          "attributed_ns": total, "device": "cpu", "comm_ns": 0, "overlap_ns": 0})


def _shape_flops(rank: int, ev: pl.DataFrame, steps, ctx_of, shape_rows: list) -> None:
    """Matmul FLOPs of the recorded ops, by the step holding the op's start and the op's part."""
    mm = ev.with_row_index("row").filter((pl.col("kind") == "cpu_op") & (pl.col("flops") > 0))
    if mm.height == 0:
        return
    starts = np.array([s for _, _, s, _ in steps])
    for row, start, flops in mm.select("row", "start", "flops").iter_rows():
        k = int(np.searchsorted(starts, start, side="right")) - 1
        if k < 0 or start >= steps[k][3]:
            continue
        ctx, kind = ctx_of[row]
        shape_rows.append({"rank": rank, "step": steps[k][1], "part": label_of(ctx, kind), "flops": flops})


def _top_level(ev: pl.DataFrame, clipped: np.ndarray) -> list[int]:
    """The outermost host events of the busiest thread (the one whose events cover the most time)."""
    host = ev.with_row_index("row").filter(pl.col("kind").is_in(["cpu_op", "annotation", "module"]))
    busiest = host.group_by("pid", "tid").agg((pl.col("end") - pl.col("start")).sum().alias("t")).sort(
        "t", descending=True).head(1)
    host = host.join(busiest.select("pid", "tid"), on=["pid", "tid"])
    out: list[int] = []
    ends: dict[tuple[int, int], int] = {}
    for row, pid, tid, s in host.sort("start").select("row", "pid", "tid", "start").iter_rows():
        key = (pid, tid)
        if s >= ends.get(key, -1):
            out.append(row)
            ends[key] = int(clipped[row])
    return out


def _self_times(row: int, s: int, e: int, ctx_of, children, clipped, starts, names, kinds, acc: dict,
                top: dict) -> int:
    """Add the self time of ``row``'s subtree (clipped to [s, e]) to ``acc``; returns the time added."""
    added = 0
    todo = [row]
    while todo:
        r = todo.pop()
        rs, re_ = max(starts[r], s), min(int(clipped[r]), e)
        if re_ <= rs:
            continue
        own = re_ - rs
        for c in children.get(r, ()):
            cs, ce = max(starts[c], rs), min(int(clipped[c]), re_)
            if ce > cs:
                own -= ce - cs
                todo.append(c)
        ctx, kind = ctx_of[r]
        part = label_of(ctx, kind)
        direction = _direction(ctx)
        key = (part, direction)
        acc[key] = acc.get(key, 0) + own
        added += own
        if kind == "cpu_op" and own > 0:
            t = top.setdefault((names[r], part), [0, 0])
            t[0] += own
            t[1] += 1
    return added


def _device_partition(rank, ev, device, steps, ctx_of, iteration, part_rows, step_rows, top, notes) -> None:
    host = ev.with_row_index("row").filter(pl.col("kind").is_in(["runtime", "cpu_op"]))
    by_corr = dict(host.filter((pl.col("kind") == "runtime") & (pl.col("corr") >= 0)).select("corr", "row")
                   .unique("corr", keep="first").iter_rows())
    by_ext = dict(host.filter((pl.col("kind") == "cpu_op") & (pl.col("ext") >= 0)).select("ext", "row")
                  .unique("ext", keep="first").iter_rows())
    labels: list[tuple[str, str, str]] = []  # (part, direction, class) class: compute | comm | memory
    unlinked = 0
    for kind, name, corr, ext in device.select(pl.col("kind").cast(pl.String), "name", "corr", "ext").iter_rows():
        comm = classify_kernel(name) if kind == "kernel" else None
        launch = by_corr.get(corr) if corr >= 0 else None
        if launch is None and ext >= 0:
            launch = by_ext.get(ext)
        if launch is None:
            unlinked += 1
            ctx, part = Ctx(), "unattributed"
        else:
            ctx, k = ctx_of[launch]
            part = label_of(ctx, "cpu_op")
        direction = _direction(ctx)
        if comm is not None:
            labels.append((comm, direction, "comm"))
        elif kind == "memcpy":
            labels.append(("memory_copy", direction, "memory"))
        elif kind == "memset":
            labels.append(("memset", direction, "memory"))
        else:
            labels.append((part, direction, "compute"))
    if unlinked:
        notes.append(f"rank {rank}: {unlinked} of {device.height} device events have no launch in the trace "
                     "(no correlation / External id match): unattributed")
    if device["pid"].n_unique() > 1:
        notes.append(f"rank {rank}: device events on {device['pid'].n_unique()} devices; their intervals are merged "
                     "into one timeline")
    # host data-loading ranges (merged intervals): device idle time under them is data loading
    loading = _merge_intervals([(int(ev["start"][r]), int(ev["end"][r])) for r, (c, k) in ctx_of.items()
                                if k == "annotation" and c.special == "data_loading"])
    d_start = device["start"].to_numpy()
    d_end = device["end"].to_numpy()
    d_name = device["name"].to_list()
    order = np.argsort(d_start, kind="stable")
    for _row, step, s, e in steps:
        acc: dict[tuple[str, str], float] = {}
        comm_ns = overlap_ns = 0
        inside = (d_end > s) & (d_start < e)
        sel = order[inside[order]].tolist()
        for i in sel:
            top.setdefault((d_name[i], labels[i][0]), [0, 0])[1] += 1
        # sweep of elementary intervals over [s, e]
        bounds: list[tuple[int, int, int]] = []  # (time, +1/-1, index)
        for i in sel:
            bounds.append((max(int(d_start[i]), s), 1, i))
            bounds.append((min(int(d_end[i]), e), -1, i))
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
                _spread(span, active, labels, acc, top, d_name)
                classes = {labels[j][2] for j in active}
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
            part_rows.append({"rank": rank, "step": step, "iteration": iteration(step), "part": part,
                              "direction": direction, "time_ns": int(round(v))})
            total += int(round(v))
        step_rows.append({"rank": rank, "step": step, "iteration": iteration(step), "step_ns": e - s,
                          "attributed_ns": total, "device": "gpu", "comm_ns": comm_ns, "overlap_ns": overlap_ns})


def _merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


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


